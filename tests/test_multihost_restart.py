"""The pod rehearsed on one machine: `launch train --backend local` with 2 processes x 1 CPU
device on a gs:// workdir and a gs:// corpus read in per-host shares (data_ranges=4: two
ranges a host), through the fault proxy (~5% transient faults on every request class).
(tests/test_host_share.py trains 4 hosts; 2 keep this test's 3 jobs affordable on 2 cores.)

One run goes uninterrupted. In the other, one trainer is SIGKILLed mid-step; with
--max-restarts the launcher stops the job, starts it again by itself (restart 1 of 2) and
the job resumes from its newest checkpoint. Both end with the same losses, parameters and
memory, bit for bit.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import gcs_emulator, gcs_faults
from tests import train_harness as harness
from tests.sharded_corpus import sharded_corpus
from tests.test_gcs_faults_e2e import TRANSIENT
from xlnet_jax import paths
from xlnet_jax.data import staging
from xlnet_jax.training.metrics import read_metrics

BUCKET = "xlnet-test-restart"  # this module's own
ROOT = f"gs://{BUCKET}"
STEPS = 6
OVERRIDES = (
    f"--config.corpus_dir={ROOT}/corpus",
    "--config.data_ranges=4",
    f"--config.num_train_steps={STEPS}",
    "--config.checkpoint_every=2",
)


@pytest.fixture(scope="module")
def proxy():
    """The emulator behind the fault proxy, holding the 8-shard corpus; faults from here on."""
    with gcs_faults.running(seed=38, bucket=BUCKET) as proxy:
        with gcs_emulator.pointed_at(proxy.url):
            staging.publish(sharded_corpus(), f"{ROOT}/corpus")
        for fault in TRANSIENT:
            proxy.add(fault)
        yield proxy


def _launch(proxy, tmp_path: Path, name: str, *extra: str) -> subprocess.Popen:
    """`launch train --backend local` of 2 processes on ROOT/name; its stderr to a file."""
    argv = [
        sys.executable, "-m", "xlnet_jax.launch.pod", "train", "--backend", "local",
        "--num-processes", "2", "--num-cpu-devices", "1", "--timeout", "1500",
        "--log-dir", str(tmp_path / f"{name}-logs"),
        "--config", harness.CONFIG, "--workdir", f"{ROOT}/{name}", *OVERRIDES, *extra,
    ]  # fmt: skip
    env = harness.environment(**gcs_emulator.environment(proxy.url))
    env[paths.CACHE_ENV] = str(tmp_path / f"{name}-cache")
    return subprocess.Popen(
        argv,
        env=env,
        cwd=harness.REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / f"{name}.err", "wb"),  # noqa: SIM115 - closed with the process
    )


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _trainer_of(supervisor: int) -> int:
    """The pid of the trainer that process `supervisor` (xlnet-jax's parent) runs."""
    tasks = Path(f"/proc/{supervisor}/task")
    children = [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]
    assert len(children) == 1, children
    return children[0]


def test_a_killed_host_restarts_the_job_which_ends_bit_exact(proxy, tmp_path):
    straight = _launch(proxy, tmp_path, "straight")
    assert straight.wait(timeout=1600) == 0, _text(tmp_path / "straight.err")[-3000:]

    killed = _launch(proxy, tmp_path, "killed", "--max-restarts=2", "--restart-pause=1")
    log, err = tmp_path / "killed-logs" / "process_0.log", tmp_path / "killed.err"
    deadline = time.time() + 900
    # Step 5 comes after the save of step 4, which first waits for step 2's to complete: the
    # relaunch then has a checkpoint to resume from (at step 4 it may not yet).
    while not re.search(r"^step 5/", _text(log), re.M):
        assert killed.poll() is None and time.time() < deadline, _text(err)[-3000:]
        time.sleep(0.01)
    supervisor = int(re.search(r"process 1: pid (\d+)", _text(err)).group(1))
    os.kill(_trainer_of(supervisor), signal.SIGKILL)  # as the OOM killer would
    assert killed.wait(timeout=3200) == 0, _text(err)[-3000:]

    said = _text(err)
    assert "(restart 1 of 2)" in said and "(restart 2 of 2)" not in said, said[-3000:]
    assert re.search(r"process 1 exited with code 137|the job lost", said), said[-3000:]
    for i in range(2):
        assert "Resumed from step" in _text(tmp_path / "killed-logs" / f"process_{i}.log")
    proxy.clear()  # the checks below read what the runs left
    faults = sum(n for key, n in proxy.counts.items() if not key.startswith("outage"))
    assert faults >= 10, proxy.counts
    with gcs_emulator.pointed_at(proxy.url):
        _assert_same_run(f"{ROOT}/killed", f"{ROOT}/straight")


def _assert_same_run(got: str, want: str) -> None:
    losses = {s: r["loss"] for s, r in read_metrics(got).items()}
    assert losses == {s: r["loss"] for s, r in read_metrics(want).items()}
    assert sorted(losses) == list(range(1, STEPS + 1))
    harness.assert_trees_equal(harness.final_params(got), harness.final_params(want))
    harness.assert_trees_equal(
        harness.checkpoint_arrays(got, STEPS)["mems"],
        harness.checkpoint_arrays(want, STEPS)["mems"],
    )
