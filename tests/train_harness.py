"""Runs `xlnet-jax train` as a real subprocess, for the resume, preemption and kill tests."""

import atexit
import functools
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from tests import test_data_common
from tests.train_config import get_config
from tests.xla_flags import COMPILATION_CACHE, FAST_COMPILE
from xlnet_jax.checkpoint.reader import load_trained_params, read_checkpoint
from xlnet_jax.run.preflight import check_run
from xlnet_jax.training import sharding
from xlnet_jax.training.metrics import read_metrics
from xlnet_jax.training.program import build_program

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "tests" / "train_config.py")
SLOW_STEPS = REPO / "scripts" / "slow_steps.py"
CACHE = COMPILATION_CACHE  # the test run's (tests/xla_flags.py)
os.makedirs(CACHE, exist_ok=True)


def corpus_dir() -> str:
    return test_data_common.small_corpus()


def environment(**extra) -> dict:
    env = dict(os.environ)
    env.update(
        XLA_FLAGS=FAST_COMPILE,
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO),
        XLNET_JAX_COMPILATION_CACHE=CACHE,
        **{k: str(v) for k, v in extra.items()},
    )
    return env


def train_command(workdir, *overrides, devices: int = 1) -> list[str]:
    return [
        sys.executable, "-m", "xlnet_jax.cli", "train",
        "--config", CONFIG, "--workdir", str(workdir),
        f"--num_cpu_devices={devices}",
        f"--config.corpus_dir={corpus_dir()}",
        *overrides,
    ]  # fmt: skip


def start(workdir, *overrides, step_delay: float = 0.0, devices: int = 1) -> subprocess.Popen:
    """Starts a training run; its output goes to WORKDIR.log.

    With step_delay, each step sleeps that long (scripts/slow_steps.py), so that kills and
    signals land at the steps a test aims for.
    """
    pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
    log = open(f"{workdir}.log", "ab")  # noqa: SIM115 - closed with the process
    command = train_command(workdir, *overrides, devices=devices)
    if step_delay:
        command = [sys.executable, str(SLOW_STEPS), str(step_delay), *command[3:]]
    return subprocess.Popen(
        command,
        env=environment(),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def run(workdir, *overrides, devices: int = 1, timeout: float = 400) -> None:
    """Runs a training run to its end and checks it succeeded."""
    process = start(workdir, *overrides, devices=devices)
    assert process.wait(timeout=timeout) == 0, log_tail(workdir)


def run_to_failure(workdir, *overrides, timeout: float = 400) -> subprocess.CompletedProcess:
    """Runs training expecting it to stop by itself; returns its exit code and output."""
    return subprocess.run(
        train_command(workdir, *overrides),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


@functools.cache
def reference_run() -> pathlib.Path:
    """An uninterrupted run of tests/train_config.py, checkpointed every 2 steps (4..12 kept),
    with a profiler trace of steps 8:10 (profiling changes no result).

    Trained once per test session and shared by the reliability tests: copy it before
    changing anything in it.
    """
    root = tempfile.mkdtemp(prefix="xlnet-reference-run-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    workdir = pathlib.Path(root) / "run"
    run(workdir, "--config.checkpoint_every=2", "--profile_steps=8:10")
    return workdir


def restore_setup(**overrides):
    """(config, corpus fingerprint, abstract state) to restore a test run in this process."""
    config = get_config()
    config.corpus_dir = overrides.pop("corpus_dir", None) or corpus_dir()
    for name, value in overrides.items():
        config[name] = value
    _, fingerprint = check_run(config, jax.device_count(), evaluates=False)
    program = build_program(config, sharding.make_mesh(config))
    return config, fingerprint, program.abstract_state


def copy_run(source, target) -> pathlib.Path:
    """A private copy of a finished workdir (without its lock file)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".lock-*"))
    return pathlib.Path(target)


def log_tail(workdir) -> str:
    text = pathlib.Path(f"{workdir}.log").read_text(errors="replace")
    return "\n".join(text.splitlines()[-30:])


def wait_for(condition, process: subprocess.Popen, workdir, timeout: float = 400) -> None:
    """Polls `condition` every 5 ms while the run is alive."""
    deadline = time.time() + timeout
    while not condition():
        assert process.poll() is None, "the run ended early:\n" + log_tail(workdir)
        assert time.time() < deadline, "timed out:\n" + log_tail(workdir)
        time.sleep(0.005)


def checkpoint_done(workdir, step: int) -> bool:
    """Whether step's checkpoint is finalised (orbax renames its temporary dir when done)."""
    return (pathlib.Path(workdir) / "checkpoints" / str(step) / "_CHECKPOINT_METADATA").exists()


def kill(process: subprocess.Popen, sig=signal.SIGKILL) -> int:
    process.send_signal(sig)
    return process.wait(timeout=120)


def losses(workdir) -> dict[int, float]:
    if not (pathlib.Path(workdir) / "metrics.jsonl").exists():
        return {}
    return {step: r["loss"] for step, r in read_metrics(str(workdir)).items()}


def final_params(workdir):
    return load_trained_params(str(workdir))[1]


def assert_trees_equal(a, b) -> None:
    """Bit-for-bit equality of two pytrees of arrays."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def checkpoint_arrays(workdir, step: int) -> dict:
    """The state and memory arrays saved at `step`, read onto one local device."""
    checkpoint = read_checkpoint(str(workdir), step)
    return {"state": checkpoint["state"], "mems": checkpoint["mems"]}
