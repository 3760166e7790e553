"""benchmarks/pretrain_recipe.py end to end at a toy size (tests/test_benchmark_transfer_smoke's
small corpus, made-up man-page tree and one-layer model): the default and the paper's Adam
at one pretraining seed, each evaluated under the default's config and fine-tuned on SST-2.

The paper's update (the per-core clip over 8 cores) is left out: the toy batch of 2 rows
does not split over 8 cores (tests/test_pretrain_clip_replicas.py holds that update)."""

import argparse
import json
import os

import numpy as np
import pytest
from test_data_common import scratch

from benchmarks import pretrain_recipe
from tests.test_benchmark_transfer_smoke import run_benchmark


@pytest.fixture(scope="module")
def result():
    out = scratch("pretrain-recipe")
    flags = ["--recipes", "default,paper's Adam", "--pretrain_seeds", "0"]
    return run_benchmark("pretrain_recipe.py", out, *flags), out


def test_the_table_has_each_recipe_judged_and_the_option_trained(result):
    """A row per recipe: a finite held-out loss below twice the log of the 500-piece
    vocabulary, an SST-2 accuracy that is a share, the default's difference 0; the paper's
    Adam trained with pretrain_adam_variant original and was fine-tuned from its own run."""
    run, out = result
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split(" | ") for line in run.stdout.splitlines() if line.startswith("| ")]
    assert [r[0] for r in rows[1:]] == ["| default", "| paper's Adam"], run.stdout
    for row in rows[1:]:
        loss, accuracy = (float(cell.split("; ")[1]) for cell in row[1:3])
        assert 0 < loss < 2 * np.log(500) and 0 <= accuracy <= 1, run.stdout
    assert rows[1][1].endswith("; +0.0000"), run.stdout
    with open(os.path.join(out, "papers_Adam_seed0", "run", "config.json")) as f:
        assert json.load(f)["pretrain_adam_variant"] == "original"
    with open(os.path.join(out, "ft_papers_Adam_seed0", "ours", "sst-2", "finetune.json")) as f:
        assert json.load(f)["init_from"] == os.path.join(out, "papers_Adam_seed0", "at_2")


def test_recipe_list_keeps_the_default_first_and_refuses_unknown_names():
    assert pretrain_recipe.recipe_list("paper's Adam, default") == ["default", "paper's Adam"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown"):
        pretrain_recipe.recipe_list("lamb")
