"""`xlnet-jax launch run finetune` on the local backend: a run preempted mid-way (SIGTERM:
the trainer saves and exits 6) is started again by the launcher and ends exactly as an
uninterrupted run; a bad input is not retried and its one line reaches the user; the dry
run prints the finetune command of each process (one, or N joined by a coordinator; every
worker of a slice of several hosts); a multislice, and --seeds over several processes, are
refused in one line. (tests/test_finetune_multihost.py runs several processes.)

One tiny model and task (2 x 32 XLNet, 4 steps), and one uninterrupted `launch run finetune`
for the module. The launched processes get one CPU device (this process simulates 8).
"""

import json
import os
import pathlib
import signal
import sys
import threading
import time
from unittest import mock

import jax
import numpy as np
import pytest

from tests import finetune_source
from tests.launch_printed import read_back
from tests.xla_flags import FAST_COMPILE
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.launch import pod

pytestmark = pytest.mark.usefixtures("committed_tree")
REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "finetune" / "cpu.py")
WORDS = "river mountain forest lake engine wheel motor gear the a is here and".split()
OVERRIDES = [
    "--config.seq_len=16",
    "--config.batch_size=8",
    "--config.num_train_steps=4",
    "--config.warmup_steps=1",
    "--config.checkpoint_every=2",
    "--config.log_every=2",
    "--config.learning_rate=1e-3",
]
STEP_DELAY_S = 2.0  # scripts/slow_steps.py: the SIGTERM sent after step 2 lands in step 3


def _sentences(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(3, 9))) for _ in range(count)]


@pytest.fixture(scope="module", autouse=True)
def environment():
    """The launched processes: one CPU device each (a quicker compile than 8), the quick
    compiles of this suite, and the test run's compilation cache (a restart's compile comes
    from it, as a user's would)."""
    env = {"XLA_FLAGS": FAST_COMPILE, "PYTHONPATH": str(REPO)}
    with finetune_source.run_compilation_cache():
        with mock.patch.dict(os.environ, env):
            yield


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> dict[str, pathlib.Path]:
    """A random 2 x 32 XLNet with a 40-piece tokenizer, and a two-label task: is the first
    word a landscape's or a machine's?"""
    rng = np.random.default_rng(0)
    source = tmp_path_factory.mktemp("source")
    shape = dict(d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64)
    finetune_source.write_source(source, _sentences(rng, 2000), 40, shape, scale=0.05)
    data = tmp_path_factory.mktemp("data")
    for split, count in (("train", 64), ("dev", 12)):
        lines = []
        for text in _sentences(rng, count):
            first = rng.choice(WORDS[:8])
            lines.append(f"{'land' if WORDS.index(first) < 4 else 'machine'}\t{first} {text}")
        (data / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return {"source": source, "data": data}


def task_flags(task, data_dir=None) -> list[str]:
    """`launch`'s finetune flags for the task (its data, or `data_dir`)."""
    data, source = data_dir or task["data"], task["source"]
    return ["--task-name=classification", f"--data-dir={data}", f"--init-from={source}"]


def launch(workdir: pathlib.Path, *flags: str, delay: float = 0.0) -> int:
    """`launch run finetune --backend local` of `flags`, each step `delay` s late."""
    argv = ["run", "finetune", "--backend", "local", "--config", CONFIG,
            "--workdir", str(workdir), "--log-dir", f"{workdir}-logs", "--timeout", "600",
            "--restart-pause", "0", "--max-restarts", "2", *flags, *OVERRIDES]  # fmt: skip
    slow = [sys.executable, str(REPO / "scripts" / "slow_steps.py"), str(delay)]
    return pod.main(argv, local_program=slow)


@pytest.fixture(scope="module")
def straight(tmp_path_factory, task) -> pathlib.Path:
    """An uninterrupted `launch run finetune`."""
    workdir = tmp_path_factory.mktemp("runs") / "straight"
    assert launch(workdir, *task_flags(task)) == 0
    return workdir


def trainer_pid(workdir: pathlib.Path) -> int | None:
    """The pid of the process whose argv holds --workdir=WORKDIR, if one runs."""
    wanted = f"--workdir={workdir}".encode()
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and wanted in (proc / "cmdline").read_bytes().split(b"\0"):
                return int(proc.name)
        except OSError:  # it ended meanwhile
            continue
    return None


def test_a_preempted_run_is_restarted_and_ends_as_the_uninterrupted_one(
    straight, task, tmp_path, capsys
):
    workdir = tmp_path / "preempted"
    codes = []
    launcher = threading.Thread(
        target=lambda: codes.append(launch(workdir, *task_flags(task), delay=STEP_DELAY_S))
    )
    launcher.start()
    metrics, deadline = workdir / "metrics.jsonl", time.monotonic() + 300
    while not (metrics.exists() and '"step": 2,' in metrics.read_text()):
        assert launcher.is_alive() and time.monotonic() < deadline, capsys.readouterr().err
        time.sleep(0.05)
    pid = trainer_pid(workdir)
    assert pid is not None, "the fine-tuning process ended before step 3"
    os.kill(pid, signal.SIGTERM)  # a preemption notice
    launcher.join(timeout=600)
    said = capsys.readouterr().err
    assert codes == [0], said
    assert "(exit code 6); training again in 0 s on every process" in said, said
    assert "(restart 1 of 2)" in said and "(restart 2 of 2)" not in said, said
    log = (tmp_path / "preempted-logs" / "process_0.log").read_text()
    assert "SIGTERM: saved step 3 and stopped" in log and "Resumed from step 3" in log, log
    mine, theirs = read_checkpoint(str(workdir), 4), read_checkpoint(str(straight), 4)
    for a, b in zip(jax.tree.leaves(mine["state"]), jax.tree.leaves(theirs["state"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for name in ("eval_results.json", "predictions/dev.jsonl"):
        assert (workdir / name).read_bytes() == (straight / name).read_bytes(), name
    assert json.loads((workdir / "eval_results.json").read_text())["step"] == 4


def test_the_loop_beats_for_the_hang_bound(straight):
    """The launcher touches the heartbeat file before it starts the process; a later touch,
    after the run wrote finetune.json (before its first step), is the loop's."""
    beat = pathlib.Path(f"{straight}-logs") / "process_0.heartbeat"
    assert beat.stat().st_mtime > (straight / "finetune.json").stat().st_mtime


def test_a_bad_input_is_not_restarted_and_its_line_reaches_the_user(task, tmp_path, capsys):
    missing = tmp_path / "no-such-task"
    code = launch(tmp_path / "bad", *task_flags(task, data_dir=missing))
    said = capsys.readouterr().err
    assert code == 1, said
    assert "process 0 exited with code 1" in said and "training again" not in said, said
    errors = [line for line in said.splitlines() if "xlnet-jax finetune: error:" in line]
    assert len(errors) == 1 and str(missing) in errors[0], said


def test_the_dry_run_prints_the_one_finetune_command(task, capsys):
    flags = [*task_flags(task), "--num-cpu-devices", "2", "--seeds", "3", "--devices-per-seed",
             "1", "--random_weights"]  # fmt: skip
    assert pod.main(["run", "--backend", "local", "finetune", "--config", CONFIG,
                     "--workdir", "w", *flags, "--config.seed=7", "--dry-run"]) == 0  # fmt: skip
    assert read_back(capsys.readouterr().out, programs=[sys.executable]) == [[
        sys.executable, "-m", "xlnet_jax.cli", "finetune", "--num_cpu_devices=2",
        f"--config={CONFIG}", "--workdir=w", "--task_name=classification",
        f"--data_dir={task['data']}", f"--init_from={task['source']}", "--seeds=3",
        "--devices_per_seed=1", "--random_weights", "--config.seed=7",
    ]]  # fmt: skip


TPU = ["--name", "ft", "--zone", "europe-west4-a", "--workdir", "gs://b/ft"]


def test_a_one_host_slice_runs_it_on_worker_0(task, capsys):
    assert pod.main(["run", "finetune", *TPU, "--accelerator-type", "v3-8", "--config",
                     "configs/finetune/glue.py", *task_flags(task), "--dry-run"]) == 0  # fmt: skip
    *_, start = read_back(capsys.readouterr().out)
    assert start[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"]
    assert start[-3:-1] == ["--worker=0", "--command"]
    script = start[-1]
    assert "/bin/xlnet-jax finetune \\\n  --config=configs/finetune/glue.py" in script
    assert "--distributed" not in script


def test_a_slice_of_several_hosts_runs_it_on_every_worker(task, capsys):
    assert pod.main(["run", "finetune", *TPU, "--accelerator-type", "v4-16", "--config",
                     "configs/finetune/glue.py", *task_flags(task), "--dry-run"]) == 0  # fmt: skip
    *_, start = read_back(capsys.readouterr().out)
    assert start[-3:-1] == ["--worker=all", "--command"]
    assert "/bin/xlnet-jax finetune \\\n  --distributed \\\n  --config=" in start[-1]


def test_the_dry_run_of_two_local_processes_joins_them(task, capsys):
    argv = ["run", "finetune", "--backend", "local", "--config", CONFIG, "--workdir", "w",
            "--num-processes", "2", "--num-cpu-devices", "2", "--port", "4321",
            *task_flags(task), "--dry-run"]  # fmt: skip
    assert pod.main(argv) == 0
    commands = read_back(capsys.readouterr().out, programs=[sys.executable])
    assert [c[3:8] for c in commands] == [
        ["finetune", "--coordinator_address=127.0.0.1:4321", "--num_processes=2",
         f"--process_id={i}", "--num_cpu_devices=2"]
        for i in range(2)
    ]  # fmt: skip


@pytest.mark.parametrize(
    "where, said",
    [
        (["--backend", "local", "--workdir", "w", "--num-processes", "2", "--seeds", "3"],
         "--seeds 3 with --num-processes 2: "),
        ([*TPU, "--accelerator-type", "v4-16", "--seeds", "3"], "--seeds 3 on --accelerator-type "),
        ([*TPU, "--accelerator-type", "v3-8", "--queued", "--node-count", "2"], "--node-count 2: "),
    ],
)  # fmt: skip
def test_what_it_does_not_run_is_refused_in_one_line(task, capsys, where, said):
    argv = ["run", "finetune", *where, "--config", CONFIG, *task_flags(task), "--dry-run"]
    assert pod.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith(f"xlnet-jax launch run: error: {said}")


def test_the_help_explains_the_finetune_command():
    parser, subparsers = pod.build_parser()
    assert "xlnet-jax launch run finetune" in parser.format_help()
    run_help = " ".join(subparsers["run"].format_help().split())
    assert "PROGRAM finetune runs `xlnet-jax finetune` instead of `train`" in run_help
    assert "--task-name TASK" in run_help


def test_the_pod_page_shows_the_refusal_as_printed(task, capsys):
    argv = ["run", "finetune", *TPU, "--accelerator-type", "v4-16", "--seeds", "5", "--config",
            CONFIG]  # fmt: skip
    assert pod.main([*argv, *task_flags(task), "--dry-run"]) == 2
    line = capsys.readouterr().err.strip()
    assert line in (REPO / "docs" / "tpu-pods.md").read_text().splitlines()
