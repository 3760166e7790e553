"""Multi-host faults: 2 processes x 2 CPU devices under jax.distributed on one machine.

- a rerun resumes, and SIGTERM to one process: every process saves the same step and exits
  6 (stopped early);
- a damaged newest checkpoint: every process falls back to the same older step.
A process lost mid-run (SIGKILL, SIGSTOP) is tests/test_multihost_host_death.py's case.
"""

import shutil
import signal
import subprocess
import sys
import time

from tests import train_harness as harness
from tests.test_damaged_checkpoints import truncate
from xlnet_jax.errors import STOPPED_EXIT_CODE
from xlnet_jax.launch import commands, local

HEARTBEAT = 10  # seconds: JAX declares a silent process dead after this


def _start(workdir, *overrides, slow: float = 0.0) -> list[subprocess.Popen]:
    """Both processes of a 2-process run in `workdir`; each logs to WORKDIR.p{i}.log."""
    program = [sys.executable, str(harness.SLOW_STEPS), str(slow)] if slow else [
        sys.executable, "-m", "xlnet_jax.cli"
    ]  # fmt: skip
    argvs = commands.local_train(
        program, local.free_port(), 2, 2, harness.CONFIG, str(workdir),
        [f"--config.corpus_dir={harness.corpus_dir()}", *overrides],
    )  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [*argv, f"--heartbeat_timeout={HEARTBEAT}"],
            env=harness.environment(),
            cwd=harness.REPO,
            stdout=open(f"{workdir}.p{i}.log", "ab"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
        )
        for i, argv in enumerate(argvs)
    ]


def _steps(workdir) -> list[int]:
    """The finalised checkpoint steps."""
    return [
        int(p.name)
        for p in (workdir / "checkpoints").iterdir()
        if p.name.isdigit() and harness.checkpoint_done(workdir, int(p.name))
    ]


def _log(workdir, i: int) -> str:
    return open(f"{workdir}.p{i}.log", errors="replace").read()


def _wait_for(condition, processes, workdir, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not condition():
        alive = all(p.poll() is None for p in processes)
        assert alive and time.time() < deadline, _log(workdir, 0)[-3000:]
        time.sleep(0.01)


def test_a_rerun_resumes_and_sigterm_to_one_process_saves_everywhere(tmp_path):
    workdir = harness.copy_run(harness.reference_run(), tmp_path / "run")
    for step in (6, 8, 10, 12):  # the rerun resumes from step 4
        shutil.rmtree(workdir / "checkpoints" / str(step))
    processes = _start(workdir, slow=0.3)
    # As early as possible: while the resumed run restores and compiles.
    _wait_for(lambda: "Resumed from step" in _log(workdir, 1), processes, workdir)
    steps_before = set(_steps(workdir))
    processes[1].send_signal(signal.SIGTERM)  # a preemption notice on one host only
    codes = [p.wait(timeout=200) for p in processes]
    stopped = [STOPPED_EXIT_CODE] * 2  # saved, before the last step: not done
    assert codes == stopped, _log(workdir, 0)[-3000:] + _log(workdir, 1)[-3000:]
    saved = set(_steps(workdir)) - steps_before
    assert len(saved) >= 1 and max(saved) < 12, saved  # stopped early, at a saved step
    assert f"SIGTERM: saved step {max(saved)}" in _log(workdir, 0)
    for i in (0, 1):
        assert "Resumed from step 4" in _log(workdir, i)


def test_a_damaged_newest_checkpoint_sends_every_process_to_the_same_older_step(tmp_path):
    workdir = harness.copy_run(harness.reference_run(), tmp_path / "run")
    truncate(workdir / "checkpoints" / "12")
    shutil.rmtree(workdir / "checkpoints" / "4")  # fewer steps to retry
    processes = _start(workdir)
    codes = [p.wait(timeout=300) for p in processes]
    assert codes == [0, 0], _log(workdir, 0)[-3000:] + _log(workdir, 1)[-3000:]
    for i in (0, 1):
        assert "Resumed from step 10" in _log(workdir, i), _log(workdir, i)[-3000:]
    assert [p.name.split("-")[0] for p in (workdir / "checkpoints_damaged").iterdir()] == ["12"]
    assert harness.checkpoint_done(workdir, 12)  # step 12 saved again, intact
