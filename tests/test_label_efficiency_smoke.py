"""benchmarks/label_efficiency.py end to end at a toy size: a two-step pretraining of a
one-layer model on the small corpus, then the man task built from a made-up man-page tree,
two subset sizes, one seed, a two-rate grid and two fine-tuning steps a run (8 `finetune`
processes, each a JAX start-up; the pair task's files are checked on their own, unrun).

What it holds the command to: the table, results.json, the PNG and every cell's cache file
exist; a rerun reuses every run (no `finetune` starts the second time); and each start's
rate was chosen on the held-out part of train, never on dev: the selection runs read a dev
file made of train lines only, none of which any subset trains on, and the chosen rate is
the best of what those runs scored."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from test_benchmark_transfer_smoke import write_man_tree
from test_data_common import scratch, small_corpus

from benchmarks import label_efficiency
from tests.xla_flags import FAST_COMPILE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "n_layer=1 d_model=32 n_head=2 d_head=16 d_inner=64 mem_len=8".split()


def _env() -> dict:
    return {
        **os.environ,
        "XLA_FLAGS": FAST_COMPILE,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": scratch("jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def run_benchmark(out: str, init_from: str, man: str) -> subprocess.CompletedProcess:
    """The benchmark's command line at toy size: 2 sizes, 1 seed, 2 rates, 2 steps."""
    command = [
        sys.executable, os.path.join(REPO, "benchmarks", "label_efficiency.py"),
        "--init_from", init_from, "--out", out, "--man", man, "--tasks", "man", "--sizes", "4,all",
        "--seeds", "1", "--lrs", "1e-4,3e-3", "--select_size", "4", "--held_out", "4",
        "--steps", "2", "--batch_size", "4", "--seq_len", "16", "--per_section", "12",
        "--words", "12", "--pages", "12", "--pairs", "16", "--png", os.path.join(out, "c.png"),
    ]  # fmt: skip
    # The timeout bounds a hang, not the speed: minutes on a loaded 2-core machine.
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def runs() -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess, str]:
    """The first run, the rerun in the same --out, and that folder."""
    out = scratch("label-efficiency")
    man = os.path.join(out, "man")
    write_man_tree(man)
    init_from = os.path.join(out, "pretrained")
    train = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "train", "--config", "tests/train_config.py",
         "--workdir", init_from, f"--config.corpus_dir={small_corpus()}",
         "--config.num_train_steps=2", "--config.warmup_steps=1",
         "--config.checkpoint_every=2", *[f"--config.{m}" for m in MODEL]],
        cwd=REPO, env={**_env(), "PYTHONPATH": REPO}, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    first = run_benchmark(out, init_from, man)
    assert first.returncode == 0, first.stderr[-3000:]
    return first, run_benchmark(out, init_from, man), out


def test_table_png_and_cache_are_written(runs):
    """A row per task and start, a difference row per task; accuracies are shares; the PNG,
    the markdown table and each cell's and each rate's JSON exist."""
    first, _, out = runs
    rows = [line.split(" | ") for line in first.stdout.splitlines() if line.startswith("| ")]
    assert [r[:2] for r in rows[1:]] == [
        [task, start]
        for task in ("| man",)
        for start in ("pretrained", "random weights", "pretrained − random")
    ], first.stdout
    for row in rows[1:]:
        if row[1] != "pretrained − random":
            for cell in row[3:]:
                assert 0 <= float(cell.split(" ")[0]) <= 1, first.stdout
    with open(os.path.join(out, "c.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    table = [line for line in first.stdout.splitlines() if line.startswith("|")]
    with open(os.path.join(out, "table.md")) as f:
        assert [line for line in f.read().splitlines() if line.startswith("|")] == table
    for task in ("man",):
        for start in ("pretrained", "random_weights"):
            for size in ("n4", "nall"):
                assert os.path.isfile(os.path.join(out, "cells", task, start, size + ".json"))
            for lr in ("0.0001", "0.003"):
                assert os.path.isfile(os.path.join(out, "select", task, start, f"lr_{lr}.json"))


def test_rerun_reuses_every_run(runs):
    """The second command starts no fine-tuning and prints the same table."""
    first, second, _ = runs
    assert second.returncode == 0, second.stderr[-3000:]
    assert first.stdout.count("$ xlnet-jax finetune") == 2 * (2 + 2), first.stdout
    assert "$ xlnet-jax finetune" not in second.stdout, second.stdout
    assert second.stdout.count("reusing ") == 2 * (2 + 2), second.stdout
    table = [line for line in first.stdout.splitlines() if line.startswith("| ")]
    assert table == [line for line in second.stdout.splitlines() if line.startswith("| ")]


def test_rate_is_chosen_on_held_out_train_never_on_dev(runs):
    """The selection runs' dev.tsv is train lines only (none of dev), none of which a subset
    trains on; they read that folder; and the chosen rate is the best held-out score's."""
    _, _, out = runs
    record = json.load(open(os.path.join(out, "results.json")))
    for task, files in record["tasks"].items():
        train = set(label_efficiency.read_lines(os.path.join(files["source"], "train.tsv")))
        dev = set(label_efficiency.read_lines(os.path.join(files["source"], "dev.tsv")))
        held = label_efficiency.read_lines(os.path.join(files["select"], "dev.tsv"))
        assert len(held) == 4 and set(held) <= train and not set(held) & dev, task
        for folder in [files["select"], *files["dirs"].values()]:
            assert not set(label_efficiency.read_lines(os.path.join(folder, "train.tsv"))) & set(
                held
            ), folder
        for start, result in record["results"][task].items():
            scores = result["rate"]["held_out"]
            best = max(scores, key=lambda lr: (scores[lr][0], -scores[lr][1]))
            assert float(best) == result["rate"]["chosen"], (task, start, scores)
            for lr in scores:
                run = os.path.join(out, "select", task, start.replace(" ", "_"), f"lr_{lr}")
                with open(os.path.join(run, "finetune.json")) as f:
                    assert json.load(f)["data_dir"] == files["select"]
            for size in record["sizes"]:
                cell = result["cells"][str(size)]["settings"]
                assert cell["lr"] == result["rate"]["chosen"], (task, start, size)


def test_pair_task_is_two_sentences_of_one_page_or_of_two(tmp_path):
    """The pair files are LABEL<TAB>A<TAB>B lines, `same` and `other` in equal shares; a
    `same` pair's sentences are consecutive in one page, an `other` pair's from two pages."""
    man = str(tmp_path / "man")
    write_man_tree(man)
    out = str(tmp_path / "pair")
    label_efficiency.write_pair_task(man, out, pages=12, pairs=40)
    pages = {}
    for section in ("1", "3", "7", "8"):
        for name in os.listdir(os.path.join(man, f"man{section}")):
            with gzip.open(os.path.join(man, f"man{section}", name), "rt") as f:
                pages[name] = f.read().split("DESCRIPTION\n")[1].split("\n")[:-1]
    for split, count in (("train", 40), ("dev", 10)):
        lines = [line.split("\t") for line in label_efficiency.read_lines(f"{out}/{split}.tsv")]
        assert {len(line) for line in lines} == {3}, split
        labels = [line[0] for line in lines]
        assert abs(labels.count("same") - labels.count("other")) <= 1, labels
        assert len(lines) >= count * 0.9, (split, len(lines))
        for label, a, b in lines:
            where = [n for n, s in pages.items() if a in s and b in s]
            if label == "same":
                assert any(pages[n].index(b) == pages[n].index(a) + 1 for n in where), (a, b)
            else:
                assert not where, (a, b)


def test_sizes_are_increasing_with_all_last():
    assert label_efficiency.size_list("16,64,all") == [16, 64, "all"]
    for bad in ("64,16", "all,16", "0,all", "x"):
        with pytest.raises(Exception, match="give positive|increasing"):
            label_efficiency.size_list(bad)
