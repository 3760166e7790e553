"""Each benchmark script runs end to end at a toy size and prints its markdown table.

The scripts run as subprocesses on one CPU device (not the tests' 8 simulated ones), sharing
a persistent compilation cache: the toy train step they all build compiles once.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_data_common import scratch, small_corpus

from tests.xla_flags import FAST_COMPILE

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
    "mixture_pipeline.py": ("--shapes", "toy", *TOY),
    "matmul_bound.py": ("--shapes", "toy", *TOY, "--step", "--step_iters", "1"),
    # Also a check: it exits non-zero unless our first step's loss matches HF's within 1e-4.
    "learning_curve.py": ("--steps", "3", "--every", "1"),
}


@pytest.fixture(scope="module")
def env() -> dict:
    """One device (no forced device count), quick compiles, and a compilation cache shared by
    all the scripts."""
    env = dict(os.environ)
    env.update(
        XLA_FLAGS=FAST_COMPILE,
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
    if script == "mixture_pipeline.py":  # the one corpus thrice: a 3-corpus layout in seconds
        args += ["--corpora", ",".join([small_corpus()] * 3)]
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


def test_pretrain_vs_hf_prints_both_rows(env: dict):
    """benchmarks/pretrain_vs_hf.py for two steps of a one-layer model on the small corpus:
    our `train`, HF's trainer, HF's weights through import-hf, both scored by our eval; the
    table has one row per side with a finite held-out loss and tokens/s."""
    model = ("n_layer=1 d_model=32 n_head=2 d_head=16 d_inner=64 batch_size=2 seq_len=16 "
             "reuse_len=8 mem_len=8 perm_size=8 num_predict=4").split()  # fmt: skip
    result = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "pretrain_vs_hf.py"), "--out",
         scratch("pretrain-vs-hf"), "--corpus", small_corpus(), "--steps", "2",
         "--eval_steps", "1", "--tasks", "", *[f"--set={m}" for m in model]],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a hang's bound, not a speed check: minutes on a loaded 2-core machine
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in result.stdout.splitlines()
            if line.startswith(("| xlnet-jax |", "| HF |"))}  # fmt: skip
    assert set(rows) == {"| xlnet-jax", "| HF"}, result.stdout
    for tokens_per_sec, _, loss, _ in rows.values():
        assert float(tokens_per_sec) > 0 and 0 < float(loss) < 2 * np.log(500), result.stdout


def test_finetune_vs_hf_writes_official_layouts():
    """benchmarks/finetune_vs_hf.py's task files, from pages of made-up sentences, read back
    through our GLUE readers (SST-2, MNLI's three splits, STS-B) with the labels it meant:
    section 1 -> "1", section 3 -> "0"; the three NLI labels in equal thirds; the STS-B score
    5 * (1 - share of sentence1's words replaced)."""
    sys.path.insert(0, os.path.dirname(BENCHMARKS))
    from benchmarks import finetune_vs_hf as vs_hf
    from xlnet_jax.finetune.registry import get_task

    rng = np.random.default_rng(0)
    words = [f"w{k}" for k in range(300)]

    def page(n: int, section: str) -> tuple[str, str]:
        text = ". ".join(" ".join(rng.choice(words, 8)) for _ in range(5)) + "."
        return f"page{section}_{n}.{section}.gz", text

    pages = {s: [page(n, s) for n in range(30)] for s in ("1", "3", "7", "8")}
    root = scratch("vs-hf")
    vs_hf.write_sst2(pages, os.path.join(root, "sst-2"), words=20)
    vs_hf.write_mnli(pages, os.path.join(root, "mnli"), count=60)
    vs_hf.write_stsb(pages, os.path.join(root, "sts-b"), count=60)

    sst2 = get_task("sst-2")
    examples = sst2.read(os.path.join(root, "sst-2"), "train") + sst2.read(
        os.path.join(root, "sst-2"), "dev"
    )
    assert len(examples) == 60
    by_text = {text.split(".")[0]: s for s, group in pages.items() for _, text in group}
    for e in examples:
        first = " ".join(e.text_a.split()[:8]).rstrip(".")
        assert e.label == {"1": "1", "3": "0"}[by_text[first]], e
    mnli = get_task("mnli")
    for split, size in (("train", 60), ("dev_matched", 15), ("dev_mismatched", 15)):
        labels = [e.label for e in mnli.read(os.path.join(root, "mnli"), split)]
        assert len(labels) == size and labels.count("entailment") == size // 3, (split, labels)
    for e in get_task("sts-b").read(os.path.join(root, "sts-b"), "train"):
        a, b = e.text_a.split(), e.text_b.split()
        kept = sum(x == y for x, y in zip(a, b, strict=True))
        assert kept >= round(len(a) * e.label / 5), e  # a replacement may draw the same word
