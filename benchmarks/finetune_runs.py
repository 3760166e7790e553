"""Shared by the fine-tuning benchmarks: one `xlnet-jax finetune` run as a subprocess, its
command printed, and what it left (dev results, ms/step after the first interval)."""

import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def finetune(workdir: str, *flags: str) -> dict:
    """Runs `xlnet-jax finetune --workdir WORKDIR FLAGS...`; returns {"dev": {...},
    "ms_per_step": median step time past step 10, "seconds": wall time of the command}."""
    command = ["xlnet-jax", "finetune", "--workdir", workdir, *flags]
    print("$", " ".join(command), flush=True)
    env = {**os.environ, "PYTHONPATH": REPO}
    log = open(
        os.path.join(os.path.dirname(workdir) or ".", os.path.basename(workdir) + ".log"), "w"
    )
    subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", *command[1:]],
        check=True, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    results = json.load(open(os.path.join(workdir, "eval_results.json")))
    records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    times = [r["step_time"] for r in records if "step_time" in r and r["step"] > 10]
    return {**results, "ms_per_step": 1e3 * statistics.median(times)}
