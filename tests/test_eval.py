"""`xlnet-jax eval` on another corpus, of an --init_from source, and its baselines (issue 32,
frictions 6 and 7). The session's reference run (tests/train_harness.py) is what is scored."""

import os
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
import scipy.stats

from tests import train_harness as harness
from tests.test_data_common import scratch, write_documents
from xlnet_jax.data.builtin_corpus import builtin_documents
from xlnet_jax.data.corpus import load_split
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.errors import ConfigError
from xlnet_jax.training import evaluate, run_config


def other_text() -> str:
    """English the reference run never saw: the docstrings of the stdlib's json and http."""
    stdlib = sysconfig.get_paths()["stdlib"]
    docs = [d for sub in ("json", "http") for d in builtin_documents(os.path.join(stdlib, sub))]
    return write_documents(os.path.join(scratch("other-text"), "other.txt"), docs)


@pytest.fixture(scope="module")
def corpora():
    """(the other text prepared with the run's tokenizer, and with a tokenizer of its own)."""
    tokenizer = load_manifest(harness.corpus_dir()).tokenizer_path
    same, own = scratch("same-tokenizer"), scratch("own-tokenizer")
    text = other_text()
    options = dict(validation_fraction=0.3, num_workers=1)
    prepare_corpus([text], same, spm_model=tokenizer, **options)
    prepare_corpus([text], own, vocab_size=500, **options)
    return same, own


def run_config_on(workdir, corpus_dir: str):
    config = run_config.load(workdir)
    config.corpus_dir = corpus_dir
    return config


def test_a_run_is_scored_on_another_corpus_with_its_tokenizer(corpora):
    workdir = harness.reference_run()
    same, own = corpora
    metrics = (workdir / "metrics.jsonl").read_text()
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "eval", "--workdir", str(workdir),
         f"--config.corpus_dir={same}"],
        env=harness.environment(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"the workdir {workdir} at step 12 on the validation split of {same} "
        "(not recorded in any metrics.jsonl): held-out PLM loss "
    )
    assert (workdir / "metrics.jsonl").read_text() == metrics  # the run's own record
    with pytest.raises(ConfigError, match=r"its tokenizer .* is not the one .* prepared with"):
        evaluate.evaluate_run(run_config_on(workdir, own), str(workdir))


def test_params_score_as_the_restored_checkpoint(tmp_path):
    """On the run's own corpus, its params scored as an --init_from source give the loss
    that restoring the checkpoint gives: the other-corpus path scores the same model."""
    workdir = harness.copy_run(harness.reference_run(), tmp_path / "run")
    config = run_config_on(workdir, harness.corpus_dir())
    restored = evaluate.evaluate_run(config, str(workdir))
    assert restored["recorded"] and restored["scored"] == f"the workdir {workdir} at step 12"
    source = evaluate.evaluate_run(config, None, init_from=str(workdir))
    assert not source["recorded"] and source["step"] == 12
    # The same eval step, compiled twice, on the same params and batches.
    for name in ("loss", "accuracy", "targets"):
        assert source[name] == pytest.approx(restored[name], rel=1e-6), name


def test_the_baselines_are_the_cross_entropy_and_entropy_they_are_named(corpora):
    manifest = load_manifest(corpora[0])
    vocab = manifest.vocab_size
    baselines = evaluate.unigram_baselines(manifest, vocab)
    train = np.bincount(load_split(manifest, "train").tokens, minlength=vocab)
    held = np.bincount(load_split(manifest, "validation").tokens, minlength=vocab)
    smoothed = (train + 1) / (train + 1).sum()
    own = scipy.stats.entropy(held)
    assert baselines["validation_unigram_entropy"] == pytest.approx(own, rel=1e-9)
    cross = own + scipy.stats.entropy(held, smoothed)  # H(p, q) = H(p) + KL(p || q)
    assert baselines["train_unigram_cross_entropy"] == pytest.approx(cross, rel=1e-9)
    # Another text than the run's: the train frequencies miss some of it.
    assert baselines["train_unigram_cross_entropy"] > baselines["validation_unigram_entropy"]
