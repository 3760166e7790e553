"""A fine-tuning workdir's records describe its weights: strict JSON with NaN metrics, reruns
that ask for another run refused in one line, a fine-tuned workdir continued on another
task, signals in the final evaluation, and memory without segments refused.

The tiny model, tokenizer, data and 4-step run are test_finetune_run.py's (imported).
"""

import contextlib
import io
import json
import os
import shutil
import signal
import sys
from unittest import mock

import jax
import ml_collections
import numpy as np
import pytest

from tests import test_finetune_run as tiny
from xlnet_jax import cli
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.errors import STOPPED_EXIT_CODE, ConfigError
from xlnet_jax.finetune import config as finetune_config
from xlnet_jax.finetune import predict as prediction

FLAGS, WORDS = tiny.FLAGS, tiny.WORDS
# The tiny run's fixtures, shared by name (module-scoped: built once for this module).
compilation_cache, source, data, straight = (
    tiny.compilation_cache,
    tiny.source,
    tiny.data,
    tiny.straight,
)

# One step at the warmup's learning rate of 0: the params after it are those it started from.
ONE_STEP = ["--config.num_train_steps=1", "--config.checkpoint_every=1"]


def run(workdir, source, data, *extra, task="classification") -> int:
    """`xlnet-jax finetune` in this process; a refusal's exit code comes back as SystemExit."""
    args = [f"--task_name={task}", f"--data_dir={data}", f"--init_from={source}"]
    argv = ["finetune", *args, f"--workdir={workdir}", *FLAGS, *extra]
    with mock.patch.object(sys, "argv", ["xlnet-jax", *argv]):  # config_flags reads sys.argv
        return cli.main(argv)


def strict_json(text: str):
    """Parses JSON as any other language would: a bare NaN or Infinity is an error."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def snapshot(workdir) -> dict[str, bytes]:
    """Every file of a workdir (the lock aside) and its bytes."""
    return {
        str(path.relative_to(workdir)): path.read_bytes()
        for path in sorted(workdir.rglob("*"))
        if path.is_file() and "lock" not in path.name
    }


@pytest.fixture(autouse=True)
def exits_raise(monkeypatch):
    """A refused or stopped command exits through os._exit: here a SystemExit instead."""


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    """A `regression` task whose dev scores are all equal, so its Pearson and Spearman
    correlations are NaN (a constant has no correlation)."""
    root = tmp_path_factory.mktemp("scores")
    rng = np.random.default_rng(5)
    train = [f"{WORDS.index(s.split()[0]) / 4:.2f}\t{s}" for s in tiny._sentences(rng, 32)]
    (root / "train.tsv").write_text("\n".join(train) + "\n")
    (root / "dev.tsv").write_text("".join(f"2.5\t{s}\n" for s in tiny._sentences(rng, 6)))
    return root


@pytest.fixture(scope="module")
def scored(tmp_path_factory, source, scores):
    """One regression step from the HF source (the head as it is initialised): the workdir
    and what the command printed."""
    workdir = tmp_path_factory.mktemp("scored")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run(workdir, source, scores, *ONE_STEP, task="regression") == 0
    return workdir, printed.getvalue()


@pytest.fixture
def copy(straight, tmp_path):
    """A copy of the finished 4-step run to rerun."""
    workdir = tmp_path / "copy"
    shutil.copytree(straight, workdir)
    return workdir


def test_a_nan_metric_is_written_as_null_with_what_it_was(scored):
    workdir, printed = scored
    results = strict_json((workdir / "eval_results.json").read_text())
    assert results["dev"]["pearson"] is None and results["dev"]["spearman"] is None
    assert np.isfinite(results["dev"]["loss"])
    assert results["non_finite"] == {"dev/pearson": "NaN", "dev/spearman": "NaN"}
    assert {"step": 1, **strict_json(printed)} == results  # the record the command prints
    for line in (workdir / "predictions" / "dev.jsonl").open():
        strict_json(line)


def test_a_finished_run_rerun_the_same_redoes_nothing_and_loses_nothing(
    straight, source, data, copy, caplog
):
    before = snapshot(copy)
    assert run(copy, source, data) == 0
    assert "finished at step 4" in caplog.text
    assert snapshot(copy) == before  # nothing evaluated, logged or written again


def _other_source(source, tmp_path):
    other = tmp_path / "other_source"
    shutil.copytree(source, other)
    return other


def _other_data(data, tmp_path):
    """The same task's files with one train line changed."""
    other = tmp_path / "other_data"
    shutil.copytree(data, other)
    lines = (other / "train.tsv").read_text().splitlines()
    lines[0] = lines[0].replace("\t", "\triver ", 1)
    (other / "train.tsv").write_text("\n".join(lines) + "\n")
    return other


# What each rerun changes, and the parts of the one line that refuses it.
RERUNS = {
    "fewer steps": ["--config.num_train_steps=3 is below step 4", "--config.num_train_steps=4"],
    "random weights": ["--random_weights=True", "started from pretrained weights"],
    "another source": ["--init_from={source}", "started from {saved_source}"],
    "another task": ["--task_name=regression", "was fine-tuned on classification"],
    "other train data": ["training features", "data_dir {saved_data} → {data}"],
    "not a fine-tuning": ["holds checkpoints (step 4) but no finetune.json"],
}


def rerun_of(change: str, source, data, scores, tmp_path) -> dict:
    """run()'s arguments for a rerun of the 4-step run with `change`."""
    arguments = {"source": source, "data": data, "extra": [], "task": "classification"}
    if change == "fewer steps":
        arguments["extra"] = ["--config.num_train_steps=3"]
    elif change == "random weights":
        arguments["extra"] = ["--random_weights"]
    elif change == "another source":
        arguments["source"] = _other_source(source, tmp_path)
    elif change == "another task":
        arguments.update(data=scores, task="regression")
    elif change == "other train data":
        arguments["data"] = _other_data(data, tmp_path)
    return arguments


@pytest.mark.parametrize("change", RERUNS)
def test_a_rerun_of_another_run_is_one_line_and_changes_nothing(
    change, source, data, scores, copy, tmp_path, capsys
):
    rerun = rerun_of(change, source, data, scores, tmp_path)
    if change == "not a fine-tuning":
        (copy / "finetune.json").unlink()
    before = snapshot(copy)
    with pytest.raises(SystemExit) as exited:
        run(copy, rerun["source"], rerun["data"], *rerun["extra"], task=rerun["task"])
    assert exited.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    error = lines[-1]
    assert error.startswith("xlnet-jax finetune: error: "), lines[-5:]
    names = {**rerun, "saved_source": source, "saved_data": data}
    for part in [*RERUNS[change], "start fresh with a new --workdir"]:
        assert part.format(**names) in error, error
    assert snapshot(copy) == before


def test_a_fine_tuned_workdir_continues_on_another_task(straight, scores, scored, tmp_path):
    """Regression from the classification run: its encoder exactly (a first step at
    learning rate 0 leaves it as it started), the head as fresh as a run from the HF
    source (the same seed's initialisation), not the classification head."""
    workdir = tmp_path / "continued"
    assert run(workdir, straight, scores, *ONE_STEP, task="regression") == 0
    continued = read_checkpoint(str(workdir), 1)["state"]["params"]
    classified = read_checkpoint(str(straight), 4)["state"]["params"]
    fresh = read_checkpoint(str(scored[0]), 1)["state"]["params"]
    for name, params in (("transformer", classified), ("sequence_summary", fresh)):
        for a, b in zip(*(leaves(p[name]) for p in (continued, params)), strict=True):
            np.testing.assert_array_equal(a, b)
    summary = [leaves(p["sequence_summary"]) for p in (continued, classified)]
    assert any(not np.array_equal(a, b) for a, b in zip(*summary, strict=True))
    info = json.loads((workdir / "finetune.json").read_text())
    assert info["task"] == "regression" and info["init_from"] == str(straight)


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


@pytest.mark.parametrize(
    ("signum", "name", "code"),
    [
        (signal.SIGTERM, "SIGTERM", STOPPED_EXIT_CODE),
        (signal.SIGINT, "Ctrl-C", cli.INTERRUPTED_EXIT_CODE),
    ],
)
def test_a_signal_in_the_final_evaluation_stops_it_and_the_rerun_evaluates(
    signum, name, code, straight, source, data, copy, capsys, monkeypatch
):
    """The signal lands in the final evaluation's first batch (sent from within it, so no
    timing matters): the run stops with the training loop's exit code and one line, writes
    no eval_results.json, and the rerun writes the uninterrupted run's."""
    (copy / "eval_results.json").unlink()
    shutil.rmtree(copy / "predictions")
    predict = prediction.predict

    def signalled(*args, **kwargs):
        monkeypatch.setattr(prediction, "predict", predict)  # once
        os.kill(os.getpid(), signum)
        return predict(*args, **kwargs)

    monkeypatch.setattr(prediction, "predict", signalled)
    with pytest.raises(SystemExit) as exited:
        run(copy, source, data)
    assert exited.value.code == code
    line = f"{name} during the final evaluation: step 4 is saved, its results are not written"
    assert line in capsys.readouterr().err
    assert not (copy / "eval_results.json").exists()
    if signum == signal.SIGTERM:
        assert run(copy, source, data) == 0
        for name in ("eval_results.json", "predictions/dev.jsonl", "predictions/test.jsonl"):
            assert (copy / name).read_bytes() == (straight / name).read_bytes(), name


def test_memory_without_segments_is_one_line():
    config = finetune_config.finetune_config()
    config.mem_len = 16
    with pytest.raises(ConfigError, match=r"config\.mem_len: 16 with config\.num_segments 1"):
        finetune_config.validate(config)
    config.num_segments = 2  # with segments, the memory carries the text
    finetune_config.validate(ml_collections.ConfigDict(config))
