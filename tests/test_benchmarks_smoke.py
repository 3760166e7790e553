"""Each benchmark script runs end to end at a toy size and prints its markdown table.

The scripts run as subprocesses on one CPU device (not the tests' 8 simulated ones), sharing
a persistent compilation cache: the toy train step they all build compiles once.
"""

import json
import os
import subprocess
import sys

import pytest
from test_data_common import scratch, small_corpus

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
TOY = ("--iters", "1")
RUNS = {
    "train_throughput.py": ("--shapes", "toy", "--peak_n", "256", *TOY),
    "accelerator_throughput.py": (
        *"--shapes toy --batch 4 --hf eager --dtype float32 --peak_n 256 --breakdown".split(),
        "--kernel",
        *TOY,
    ),
    "flops_check.py": ("--shapes", "toy"),
    # On a CPU its smoke pass: the kernel check at the toy shape, each step once, one tile.
    "gpu_check.py": (),
    "scaling.py": ("--only", "devices", "--device_shape", "toy", "--device_counts", "1", *TOY),
    "memory.py": ("--shapes", "toy", "--no_search"),
    "input_pipeline.py": ("--shapes", "toy", *TOY),
    "matmul_bound.py": ("--shapes", "toy", *TOY, "--step", "--step_iters", "1"),
    # Also a check: it exits non-zero unless our first step's loss matches HF's within 1e-4.
    "learning_curve.py": ("--steps", "3", "--every", "1"),
}


@pytest.fixture(scope="module")
def env() -> dict:
    """One device, and a compilation cache shared by all the scripts."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=scratch("jax-cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    return env


@pytest.mark.parametrize("script", sorted(RUNS))
def test_benchmark_prints_a_table(script: str, env: dict):
    args = list(RUNS[script])
    if script in ("input_pipeline.py", "learning_curve.py"):
        args += ["--corpus", small_corpus()]
    if script == "gpu_check.py":
        args += ["--json", os.path.join(scratch("gpu-check"), "gpu_check.json")]
    result = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a hang's bound, not a speed check: minutes on a loaded 2-core machine
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert len(table) >= 3 and set(table[1]) <= set("|-"), result.stdout
    if "--kernel" in args:  # the kernel's row trains the same toy step to the same loss:
        # float32 paths agree to ~1e-6 relative; the table prints 4 decimals, so they may
        # differ by one unit of the last printed digit.
        losses = [float(line.split(": ")[-1]) for line in result.stdout.splitlines()
                  if line.startswith("loss after") and "HF" not in line]  # fmt: skip
        assert len(losses) == 2 and abs(losses[0] - losses[1]) <= 1.0001e-4, result.stdout
    if script == "gpu_check.py":  # says it measured nothing, and writes every row as JSON
        assert "measure nothing" in result.stdout, result.stdout
        with open(args[-1]) as f:
            written = json.load(f)
        assert written["measured"] is False and len(written["checks"]) == 1, written
        assert all(check["ok"] for check in written["checks"]), written["checks"]
        assert {row["framework"] for row in written["rows"]} >= {"ours", "kernel"}, written


def test_corpus_scale_prints_its_table(env: dict):
    """benchmarks/corpus_scale.py --smoke: both preparation paths on one copy of the built-in
    corpus, the host-share rows (or "pending") and the projection."""
    result = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "corpus_scale.py"), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a hang's bound, not a speed check: minutes on a loaded 2-core machine
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert [line.split(" | ")[0] for line in table[2:4]] == [
        "| prepare, Beam, DirectRunner, 1 worker",
        "| prepare, one process, 1 worker",
    ]
    assert sum("local bytes per process" in line for line in table) == 3
    assert sum(line.startswith("| projection: ") for line in table) == 2
