"""benchmarks/pretrain_steps.py and benchmarks/pretrain_ablations.py end to end at a toy size
on the small corpus and a made-up man-page tree, and pretrain_steps' pieces that pick a
checkpoint and judge budgets, on made-up inputs.

pretrain_steps: one two-step pretraining run, its checkpoint and random weights fine-tuned
on the SST-2 layout (the table, the verdict and the PNG). pretrain_ablations, in the same
--out: its default is that run (the same layout and flags), so it adds "no memory" (mem_len
0, two steps) judged by both evals and SST-2 (the random-weights and default fine-tunings
are pretrain_steps'); the long document is left out (two more `finetune` processes).

One budget and one added variant only: each further one is another `train` or `finetune`
process (a JAX start-up and a traced step, ~10 CPU-s); picking one checkpoint among several
is tested on its own."""

import argparse
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_data_common import scratch, small_corpus

from benchmarks import pretrain_ablations, pretrain_steps
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


def run_benchmark(script: str, out: str, *flags: str) -> subprocess.CompletedProcess:
    """`python benchmarks/SCRIPT --out OUT FLAGS` on the small corpus and a made-up man tree
    in OUT, 2 pretraining steps of the toy model, SST-2 at 2 fine-tuning steps and 1 seed."""
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
        sys.executable, os.path.join(REPO, "benchmarks", script),
        "--out", out, "--corpus", small_corpus(), "--man", man, "--steps", "2",
        "--eval_steps", "1", "--tasks", "sst-2", "--ft_steps", "2", "--seeds", "1",
        "--batch_size", "4", "--seq_len", "16", "--pages", "12", "--words", "12",
        "--pairs", "8", *flags, *[f"--set={m}" for m in MODEL],
    ]  # fmt: skip
    # The timeout bounds a hang, not the speed: minutes on a loaded 2-core machine.
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def result() -> tuple[subprocess.CompletedProcess, str]:
    """pretrain_steps' run (its output) and its --out folder."""
    out = scratch("pretrain-steps")
    return run_benchmark("pretrain_steps.py", out, "--png", os.path.join(out, "curve.png")), out


@pytest.fixture(scope="module")
def ablations(result) -> tuple[subprocess.CompletedProcess, str]:
    """pretrain_ablations' run of the default (pretrain_steps' run, reused) and "no memory",
    in pretrain_steps' --out: its output and that folder."""
    run, out = result
    assert run.returncode == 0, run.stderr[-3000:]
    flags = ["--variants", "default,no memory", "--long_steps", "0"]
    return run_benchmark("pretrain_ablations.py", out, *flags), out


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


def test_ablation_table_has_each_variant_judged_every_way(ablations):
    """Random weights (fine-tuned only), then the default and "no memory", each with both
    held-out losses (finite, below twice the log of the 500-piece vocabulary; the default's
    two are one eval), an SST-2 accuracy that is a share and a positive dev loss."""
    run, _ = ablations
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split(" | ") for line in run.stdout.splitlines() if line.startswith("| ")]
    assert rows[0][-2:] == ["sst-2 accuracy", "sst-2 dev loss |"], run.stdout
    assert [r[0] for r in rows[1:]] == ["| random weights", "| default", "| no memory"]
    assert rows[1][1:3] == ["-", "-"], run.stdout
    assert rows[2][1] == rows[2][2], run.stdout
    for row in rows[2:]:
        for loss in row[1:3]:
            assert 0 < float(loss.split(" ±")[0]) < 2 * np.log(500), run.stdout
        assert 0 <= float(row[3]) <= 1 and float(row[4].rstrip(" |")) > 0, run.stdout


def test_the_default_is_pretrain_steps_run_and_no_memory_trains_without_memory(ablations):
    """The default's run, eval and fine-tunings are pretrain_steps' (reused, not rerun);
    "no memory" trained with mem_len 0 (and kept its checkpoint) and was fine-tuned from it."""
    run, out = ablations
    assert run.returncode == 0, run.stderr[-3000:]
    assert "$ xlnet-jax train" in run.stdout and "reusing the pretraining run" in run.stdout
    assert run.stdout.count("$ xlnet-jax finetune") == 1, run.stdout
    with open(os.path.join(out, "no_memory", "run", "config.json")) as f:
        assert json.load(f)["mem_len"] == 0
    source = os.path.join(out, "no_memory", "at_2")
    assert os.listdir(os.path.join(source, "checkpoints")) == ["2"]
    with open(os.path.join(out, "ft_no_memory", "ours", "sst-2", "finetune.json")) as f:
        assert json.load(f)["init_from"] == source


def test_variant_list_keeps_the_default_first_and_refuses_unknown_names():
    assert pretrain_ablations.variant_list("bi_data, default") == ["default", "bi_data"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown"):
        pretrain_ablations.variant_list("no span")
