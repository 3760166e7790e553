"""benchmarks/pretrain_steps.py: end to end at a toy size (one two-step pretraining run on
the small corpus, its checkpoint and random weights fine-tuned on the SST-2 layout built from
a made-up man-page tree: the table, the verdict and the PNG), and its pieces that pick a
checkpoint and judge budgets, on made-up inputs.

One budget only end to end: each further one is another `finetune` process (a JAX start-up
and a traced step, ~10 CPU-s); picking one checkpoint among several is tested on its own."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_data_common import scratch, small_corpus

from benchmarks import pretrain_steps
from tests.xla_flags import FAST_COMPILE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = (
    "n_layer=1 d_model=32 n_head=2 d_head=16 d_inner=64 batch_size=2 seq_len=16 "
    "reuse_len=8 mem_len=8 perm_size=8 num_predict=4"
).split()


def write_man_tree(root: str) -> None:
    """12 pages in each of man1, man3, man7 and man8, gzipped troff whose DESCRIPTION holds
    four sentences of 8 made-up words (section-specific, so SST-2 has something to learn)."""
    rng = np.random.default_rng(0)
    for section in ("1", "3", "7", "8"):
        os.makedirs(os.path.join(root, f"man{section}"))
        for k in range(12):
            lines = [
                " ".join(f"s{section}w{w}" for w in rng.integers(0, 30, 8)) + "." for _ in range(4)
            ]
            page = ".TH PAGE 1\n.SH NAME\npage\n.SH DESCRIPTION\n" + "\n".join(lines) + "\n"
            name = os.path.join(root, f"man{section}", f"page{section}_{k}.{section}.gz")
            with gzip.open(name, "wt") as f:
                f.write(page)


@pytest.fixture(scope="module")
def result() -> tuple[subprocess.CompletedProcess, str]:
    """The benchmark's run (its output) and its --out folder."""
    out = scratch("pretrain-steps")
    man = os.path.join(out, "man")
    if not os.path.isdir(man):
        write_man_tree(man)
    env = {
        **os.environ,
        "XLA_FLAGS": FAST_COMPILE,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": scratch("jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    command = [
        sys.executable, os.path.join(REPO, "benchmarks", "pretrain_steps.py"),
        "--out", out, "--corpus", small_corpus(), "--man", man, "--steps", "2",
        "--eval_steps", "1", "--tasks", "sst-2", "--ft_steps", "2", "--seeds", "1",
        "--batch_size", "4", "--seq_len", "16", "--pages", "12", "--words", "12",
        "--pairs", "8", "--png", os.path.join(out, "curve.png"), *[f"--set={m}" for m in MODEL],
    ]  # fmt: skip
    # The timeout bounds a hang, not the speed: minutes on a loaded 2-core machine.
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900), out


def test_table_has_random_weights_and_each_kept_step(result):
    """One row for random weights and one for the budget; the step's held-out loss is finite
    and below twice the log of the 500-piece vocabulary, and each accuracy is a share."""
    run, _ = result
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split(" | ") for line in run.stdout.splitlines() if line.startswith("| ")]
    assert [r[0] for r in rows[1:]] == ["| random weights", "| step 2"], run.stdout
    assert 0 < float(rows[2][2].split(" ±")[0]) < 2 * np.log(500), run.stdout
    for row in rows[1:]:
        assert 0 <= float(row[3].split(" ")[0].rstrip("*")) <= 1, run.stdout


def test_budget_is_fine_tuned_from_its_checkpoint_and_baseline_from_random(result):
    """The budget's fine-tuning started from the workdir holding its checkpoint (`--init_from`
    takes a workdir's newest), the baseline's from random weights of the run's shape."""
    run, out = result
    assert run.returncode == 0, run.stderr[-3000:]
    for name, source, random in (("step_2", "at_2", False), ("random", "run", True)):
        record = json.load(open(os.path.join(out, f"ft_{name}", "ours", "sst-2", "finetune.json")))
        assert (record["init_from"], record["random_weights"]) == (
            os.path.join(out, source),
            random,
        )
    assert run.stdout.splitlines()[-2].startswith(("smallest budget", "no budget up to 2 steps"))


def test_png_is_written(result):
    run, out = result
    assert run.returncode == 0, run.stderr[-3000:]
    with open(os.path.join(out, "curve.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_at_holds_that_step_alone(tmp_path):
    """Of a run's checkpoints 100, 200 and 400, the copy for 200 holds 200 and nothing else,
    file contents included."""
    run = tmp_path / "run"
    for step in (100, 200, 400):
        (run / "checkpoints" / str(step)).mkdir(parents=True)
        (run / "checkpoints" / str(step) / "state").write_text(f"step {step}")
    workdir = pretrain_steps.checkpoint_at(str(run), 200)
    assert os.listdir(os.path.join(workdir, "checkpoints")) == ["200"]
    with open(os.path.join(workdir, "checkpoints", "200", "state")) as f:
        assert f.read() == "step 200"


def test_verdict_needs_every_seed_above_random_on_every_task():
    """A budget counts only where each task's seeds all beat all of random weights' seeds
    on its first metric (the second metric is not judged)."""
    random = {("a", "accuracy"): [0.5, 0.6, 0.55], ("b", "pearson"): [0.0, 0.1, 0.05],
              ("b", "spearman"): [0.9, 0.9, 0.9]}  # fmt: skip
    scores = {
        pretrain_steps.RANDOM: random,
        100: {
            ("a", "accuracy"): [0.7, 0.8, 0.9],
            ("b", "pearson"): [0.05, 0.3, 0.3],
            ("b", "spearman"): [0.0, 0.0, 0.0],
        },  # fmt: skip
        200: {
            ("a", "accuracy"): [0.61, 0.7, 0.8],
            ("b", "pearson"): [0.2, 0.3, 0.4],
            ("b", "spearman"): [0.0, 0.0, 0.0],
        },  # fmt: skip
    }
    assert pretrain_steps.verdict([100, 200], scores).endswith(": 200 steps")
    assert pretrain_steps.verdict([100], scores).endswith("never on: b")
