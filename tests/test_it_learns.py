"""Training learns from context: held-out PLM loss falls far below the unigram entropy.

The corpus is a fixed cycle of words, so every target is determined by its neighbours while
its unigram distribution is near uniform: only a model whose targets really see their context
(masks, two streams, memory, optimizer, data) can beat the unigram entropy. The demo checks
the same on real text at a scale too slow for the suite (README, "Demo result").
"""

import json
import os
import re
import subprocess
import sys

import numpy as np

from tests import test_data_common
from tests.train_harness import environment
from xlnet_jax.data.corpus import unigram_entropy
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.training.evaluate import unigram_baselines

VOCAB = 48  # the 26 words, their letters and the special pieces
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()


def cyclic_corpus() -> str:
    """Documents of 8-word sentences reading the word cycle from random offsets."""
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(400):
        start = int(rng.integers(len(WORDS)))
        words = [WORDS[(start + i) % len(WORDS)] for i in range(8 * int(rng.integers(4, 12)))]
        docs.append([" ".join(words[i : i + 8]) + "." for i in range(0, len(words), 8)])
    directory = test_data_common.scratch("cyclic")
    text = test_data_common.write_documents(os.path.join(directory, "cyclic.txt"), docs)
    out = os.path.join(directory, "corpus")
    prepare_corpus([text], out, vocab_size=VOCAB, validation_fraction=0.1, num_workers=1)
    return out


OVERRIDES = [
    f"--config.vocab_size={VOCAB}", "--config.d_model=64", "--config.n_head=2",
    "--config.d_head=32", "--config.d_inner=128", "--config.seq_len=32",
    "--config.reuse_len=16", "--config.mem_len=16", "--config.perm_size=16",
    "--config.num_predict=10", "--config.num_train_steps=300", "--config.warmup_steps=10",
    "--config.learning_rate=5e-3", "--config.eval_every=300", "--config.checkpoint_every=300",
    "--config.log_every=10",
]  # fmt: skip


def train(workdir, corpus: str) -> subprocess.CompletedProcess:
    """`xlnet-jax train --config configs/tiny.py` with this test's overrides."""
    return subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "train", "--config", "configs/tiny.py",
         "--workdir", str(workdir), f"--config.corpus_dir={corpus}", *OVERRIDES],
        capture_output=True, text=True, env=environment(), timeout=600,
    )  # fmt: skip


def test_heldout_loss_falls_far_below_unigram_entropy(tmp_path):
    corpus = cyclic_corpus()
    workdir = tmp_path / "run"
    done = train(workdir, corpus)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    heldout = [row["loss"] for row in rows if row["kind"] == "eval"][-1]
    entropy = unigram_entropy(load_manifest(corpus), VOCAB)
    assert heldout < 0.5 * entropy, (heldout, entropy)

    # `xlnet-jax eval` restores the checkpoint and scores the same held-out batches, with
    # the run's own config (WORKDIR/config.json): no --config, no overrides.
    evaluated = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "eval", "--workdir", str(workdir)],
        capture_output=True, text=True, env=environment(), timeout=600,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    # Training recorded that evaluation already: it is not recorded twice. One TensorBoard
    # run holds the training and the evaluations.
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "eval"] == [300]
    assert sorted(p.name for p in (workdir / "tensorboard").iterdir()) == ["train"]
    assert (
        f"the workdir {workdir} at step 300 on the validation split of {corpus}: held-out PLM "
        f"loss {heldout:.4f} nats ± "
    ) in evaluated.stdout
    assert re.search(
        r"over [\d,]+ rows, [\d,]+ validation tokens and [\d,]+ targets", evaluated.stdout
    )
    baselines = unigram_baselines(load_manifest(corpus), VOCAB)
    assert (
        "the validation tokens' cross-entropy under the train split's unigram distribution "
        f"(add-one smoothed) is {baselines['train_unigram_cross_entropy']:.4f} nats; their own "
        f"unigram entropy is {baselines['validation_unigram_entropy']:.4f} nats."
    ) in evaluated.stdout
