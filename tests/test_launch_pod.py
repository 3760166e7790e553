"""The pod launcher: software version per TPU generation, slice flags, multislice and
queued-resource ssh, and `launch run`'s loop against a stand-in gcloud that answers for each
of two workers: preemptions, a final error on a worker other than 0, a hung worker, a
trainer stopped before its last step on a READY slice, a stop the user asked for."""

import json
import os
import sys
from pathlib import Path

import pytest

from tests.launch_printed import read_back
from xlnet_jax.errors import STOPPED_EXIT_CODE, STORAGE_EXIT_CODE
from xlnet_jax.launch import commands, job, pod, remote
from xlnet_jax.launch.pod import _parse

pytestmark = pytest.mark.usefixtures("committed_tree")
WHERE = ["--name", "xl", "--zone", "europe-west4-a"]


def dry_run(capsys, *argv: str) -> list[list[str]]:
    """The commands `launch ARGV --dry-run` prints, as bash reads them."""
    assert pod.main([*argv, "--dry-run"]) == 0
    return read_back(capsys.readouterr().out)


@pytest.mark.parametrize(
    "accelerator, version",
    [
        ("v2-8", "tpu-ubuntu2204-base"),
        ("v3-32", "tpu-ubuntu2204-base"),
        ("v4-16", "tpu-ubuntu2204-base"),
        ("v5litepod-16", "v2-alpha-tpuv5-lite"),
        ("v5e-8", "v2-alpha-tpuv5-lite"),
        ("v5p-32", "v2-alpha-tpuv5"),
        ("v6e-8", "v2-alpha-tpuv6e"),
    ],
)
def test_create_picks_the_software_version_of_the_generation(capsys, accelerator, version):
    out = dry_run(capsys, "create", *WHERE, "--accelerator-type", accelerator)
    assert out == [
        ["gcloud", "compute", "tpus", "tpu-vm", "create", "xl", "--zone=europe-west4-a",
         f"--accelerator-type={accelerator}", f"--version={version}"],
    ]  # fmt: skip


def test_the_version_is_overridable_and_an_unknown_generation_asks_for_it(capsys):
    out = dry_run(
        capsys, "create", *WHERE, "--accelerator-type", "v5p-8", "--runtime-version", "my-image"
    )
    assert out[0][-1] == "--version=my-image"
    assert pod.main(["create", *WHERE, "--accelerator-type", "v9x-8", "--dry-run"]) == 2
    assert "pass --runtime-version" in capsys.readouterr().err


def test_create_flags_and_multislice(capsys):
    out = dry_run(
        capsys, "create", *WHERE, "--accelerator-type", "v5litepod-16", "--spot", "--reserved",
        "--service-account", "trainer@proj.iam.gserviceaccount.com", "--scopes", "cloud-platform",
        "--network", "net", "--subnetwork", "sub", "--internal-ips", "--labels", "team=nlp,run=a",
    )  # fmt: skip
    assert out == [
        ["gcloud", "compute", "tpus", "tpu-vm", "create", "xl", "--zone=europe-west4-a",
         "--accelerator-type=v5litepod-16", "--version=v2-alpha-tpuv5-lite",
         "--service-account=trainer@proj.iam.gserviceaccount.com", "--scopes=cloud-platform",
         "--network=net", "--subnetwork=sub", "--labels=team=nlp,run=a", "--internal-ips",
         "--reserved", "--spot"],
    ]  # fmt: skip
    out = dry_run(
        capsys, "create", *WHERE, "--accelerator-type", "v5p-64", "--queued", "--node-count",
        "2", "--node-prefix", "xl-slice", "--spot",
    )  # fmt: skip
    assert out == [
        ["gcloud", "compute", "tpus", "queued-resources", "create", "xl", "--node-count=2",
         "--node-prefix=xl-slice", "--zone=europe-west4-a", "--accelerator-type=v5p-64",
         "--runtime-version=v2-alpha-tpuv5", "--spot"],
    ]  # fmt: skip
    assert pod.main(["create", *WHERE, "--accelerator-type", "v4-8", "--node-count", "2"]) == 2
    assert "a multislice needs --queued" in capsys.readouterr().err


def test_preemptible_is_marked_legacy(capsys):
    assert pod.main(["create", "--help"]) == 0
    assert "legacy preemptible TPU VM; prefer --spot" in " ".join(capsys.readouterr().out.split())


def test_queued_workers_are_reached_on_every_node(capsys):
    out = dry_run(capsys, "logs", *WHERE, "--queued", "--worker", "all", "--lines", "5")
    assert out == [
        ["gcloud", "compute", "tpus", "queued-resources", "ssh", "xl", "--zone=europe-west4-a",
         "--node=all", "--worker=all", "--command",
         "tail -n 5 ~/xlnet-jax-logs/train-$(hostname).log"],
    ]  # fmt: skip
    _, scp, ssh = dry_run(capsys, "setup", *WHERE, "--queued")
    assert scp[:6] == ["gcloud", "compute", "tpus", "queued-resources", "scp",
                       "/tmp/xlnet-jax-src.tar.gz"]  # fmt: skip
    assert "--node=all" in scp and "--node=all" in ssh


# --- launch run against a stand-in gcloud --------------------------------------------------

FAKE_GCLOUD = """
import json, os, sys
state_file = os.environ["FAKE_GCLOUD_STATE"]
s = json.load(open(state_file))
args = sys.argv[1:]
s["calls"].append(" ".join(args[:5]))
verb = args[3]
if len(s["calls"]) > 300:  # a launcher that polls forever: the slice goes, the job ends
    s["state"] = "TERMINATED"
if verb == "describe":
    if s["state"] is None:
        print("ERROR: NOT_FOUND", file=sys.stderr); code = 1
    else:
        print(s["state"]); code = 0
elif verb == "create":
    s["state"], code = "READY", 0
elif verb == "delete":
    s["state"], code = None, 0
else:  # ssh, on --worker=all or on one worker
    script = args[args.index("--command") + 1]
    worker = next(a.split("=", 1)[1] for a in args if a.startswith("--worker="))
    workers = range(2) if worker == "all" else [int(worker)]
    code = 0
    if "nohup" in script:
        s["trains"] += 1
    elif "$worker running" in script:  # the outcome poll
        if s["trains"] <= s["preempt"]:
            s["state"] = "PREEMPTED"
            outcomes = ["running 0"] * 2
        else:
            outcomes = s["exit"].pop(0) if isinstance(s["exit"], list) else s["exit"]
            if isinstance(outcomes, int):
                outcomes = [f"exit {outcomes}"] * 2
        for i in workers:
            print(f"worker xl-w-{i} {outcomes[i]}")
json.dump(s, open(state_file, "w"))
sys.exit(code)
"""


def run_job(
    tmp_path, monkeypatch, *, preempt: int, exit_code: int | list = 0, max_restarts: int = 2
):
    """`launch run` with a stand-in gcloud whose slice is preempted `preempt` times; the
    workers' outcomes at each poll are `exit_code` (a list: one per poll, in turn), each an
    exit code of both workers or a list of remote.outcome's words per worker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(f"#!{sys.executable}\n{FAKE_GCLOUD}")
    gcloud.chmod(0o755)
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps({"state": None, "calls": [], "trains": 0, "preempt": preempt, "exit": exit_code})
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GCLOUD_STATE", str(state))
    args = _parse(
        ["run", *WHERE, "--accelerator-type", "v4-32", "--spot", "--repo", "https://x/y.git",
         "--config", "configs/base.py", "--workdir", "gs://b/run", f"--max-restarts={max_restarts}"]
    )  # fmt: skip
    create, setup, train = pod._create(args), pod._setup(args), pod._train(args)
    stop = commands.ssh(*pod._where(args), "all", remote.stop(1))
    code = job.run_job(
        pod._where(args), False, create[0], setup, train[0], stop,
        max_restarts=max_restarts, poll=0, sleep=lambda _: None,
    )  # fmt: skip
    return code, json.loads(Path(state).read_text())


def test_run_recreates_and_resumes_after_a_preemption(tmp_path, monkeypatch, capsys):
    code, state = run_job(tmp_path, monkeypatch, preempt=1)
    assert code == 0
    verbs = [call.split()[3] for call in state["calls"]]
    assert verbs == [
        "describe", "create", "describe", "ssh", "ssh",  # create, setup, train
        "describe", "ssh",  # watch: preempted while training
        "describe", "delete", "create", "describe", "ssh", "ssh",  # recreate, setup, train
        "describe", "ssh",  # watch: finished
    ]  # fmt: skip
    assert state["trains"] == 2
    err = capsys.readouterr().err
    assert "the slice is PREEMPTED: deleting it to recreate it" in err
    assert "training ended with exit code 0" in err


def test_run_gives_up_after_its_retry_limit(tmp_path, monkeypatch, capsys):
    code, state = run_job(tmp_path, monkeypatch, preempt=99, max_restarts=2)
    assert code == 1
    assert state["trains"] == 3
    assert [c.split()[3] for c in state["calls"]].count("create") == 3
    assert (
        "launch run: error: the slice was lost (PREEMPTED) 3 time(s); gave up after "
        "--max-restarts=2" in capsys.readouterr().err
    )


@pytest.mark.parametrize("code", [5, 137])
def test_a_lost_process_or_a_killed_trainer_restarts_the_job_on_the_same_slice(
    tmp_path, monkeypatch, capsys, code
):
    code_, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[code, 0])
    assert code_ == 0 and state["trains"] == 2
    verbs = [call.split()[3] for call in state["calls"]]
    assert verbs.count("create") == 1 and verbs.count("delete") == 0
    err = capsys.readouterr().err
    assert f"(exit code {code}); training again in 30 s on every worker" in err, err


def test_a_failing_trainer_is_not_retried(tmp_path, monkeypatch, capsys):
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=3)
    assert code == 3 and state["trains"] == 1
    assert "training ended with exit code 3" in capsys.readouterr().err


def test_a_trainer_stopped_by_storage_is_trained_again_on_the_same_slice(
    tmp_path, monkeypatch, capsys
):
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[STORAGE_EXIT_CODE, 0])
    assert code == 0 and state["trains"] == 2
    verbs = [call.split()[3] for call in state["calls"]]
    assert verbs == [
        "describe", "create", "describe", "ssh", "ssh",  # create, setup, train
        "describe", "ssh",  # watch: the trainer exited 4
        "ssh",  # stop every worker
        "describe", "ssh",  # train again, no recreate or setup
        "describe", "ssh",  # watch: finished
    ]  # fmt: skip
    err = capsys.readouterr().err
    assert "object storage kept failing (exit code 4); training again in 120 s" in err
    assert "restart 1 of 2" in err


def test_storage_failures_count_among_the_restarts(tmp_path, monkeypatch, capsys):
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[STORAGE_EXIT_CODE] * 3)
    assert code == STORAGE_EXIT_CODE and state["trains"] == 3
    assert "training ended with exit code 4" in capsys.readouterr().err


def test_a_final_error_on_another_worker_ends_the_job_naming_it(tmp_path, monkeypatch, capsys):
    """Worker 1's data error (1) makes worker 0 lose a process (5): not a restart."""
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[["exit 5", "exit 1"]])
    assert code == 1 and state["trains"] == 1
    err = capsys.readouterr().err
    assert "training ended with exit code 1 (worker xl-w-1)" in err and "training again" not in err


def test_a_hung_worker_is_stopped_everywhere_and_restarted(tmp_path, monkeypatch, capsys):
    hung = [f"running {job.HANG_S + 1}", "running 2"]  # worker 0 made no step for too long
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[hung, 0])
    assert code == 0 and state["trains"] == 2
    verbs = [call.split()[3] for call in state["calls"]]
    assert verbs[5:] == ["describe", "ssh", "ssh", "describe", "ssh", "describe", "ssh"]
    err = capsys.readouterr().err
    assert f"worker xl-w-0 made no training progress for {job.HANG_S + 1} s" in err
    assert "(exit code 5); training again in 30 s on every worker" in err


def test_a_trainer_stopped_before_its_last_step_on_a_ready_slice_is_resumed(
    tmp_path, monkeypatch, capsys
):
    """A maintenance event's SIGTERM: the trainers save and exit 6 before gcloud reports
    anything; the slice stays READY."""
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[STOPPED_EXIT_CODE, 0])
    assert code == 0 and state["trains"] == 2
    err = capsys.readouterr().err
    assert "a trainer was stopped before its last step" in err
    assert "training ended with exit code 0 on every worker" in err


def test_a_stop_the_user_asked_for_ends_the_job(tmp_path, monkeypatch, capsys):
    code, state = run_job(tmp_path, monkeypatch, preempt=0, exit_code=[["stopped", "running 1"]])
    assert code == STOPPED_EXIT_CODE and state["trains"] == 1
    assert "(worker xl-w-0, stopped by `launch stop`)" in capsys.readouterr().err
