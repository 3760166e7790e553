"""Shared helpers of the data tests: small corpora prepared once per test session.

Named like a test module so it belongs with the data tests; it holds no tests itself.
"""

import atexit
import functools
import os
import shutil
import sysconfig
import tempfile

import numpy as np

from xlnet_jax.data.builtin_corpus import builtin_documents
from xlnet_jax.data.prepare import prepare_corpus

_ROOT = tempfile.mkdtemp(prefix="xlnet-data-tests-")
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def scratch(name: str) -> str:
    """A fresh directory for one test's files."""
    path = tempfile.mkdtemp(prefix=name + "-", dir=_ROOT)
    return path


def write_documents(path: str, docs: list[list[str]]) -> str:
    """Writes docs in the input format: a sentence per line, a blank line between docs."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return path


@functools.cache
def english_text() -> str:
    """~150 kB of real English: the docstrings of the stdlib's email and asyncio packages."""
    stdlib = sysconfig.get_paths()["stdlib"]
    docs = [d for sub in ("email", "asyncio") for d in builtin_documents(os.path.join(stdlib, sub))]
    return write_documents(os.path.join(_ROOT, "english.txt"), docs)


@functools.cache
def small_corpus() -> str:
    """The English text prepared with a 500-piece vocabulary and 10% held out, one shard a
    split (as every corpus prepared before --num_shards; sharded_corpus.py has 8)."""
    out = os.path.join(_ROOT, "small_corpus")
    prepare_corpus(
        [english_text()], out, vocab_size=500, validation_fraction=0.1, num_workers=1,
        num_shards=1,
    )  # fmt: skip
    return out


def ring_positions(tokens: np.ndarray, window: np.ndarray) -> list[int]:
    """Every start of `window` in the ring `tokens` (the stream read cyclically)."""
    ring = np.concatenate([tokens, tokens[: len(window) - 1]])
    views = np.lib.stride_tricks.sliding_window_view(ring, len(window))
    return np.nonzero((views == window).all(axis=1))[0].tolist()


def ring_position(tokens: np.ndarray, window: np.ndarray) -> int:
    """The start of `window` in the ring, which must be unique."""
    hits = ring_positions(tokens, window)
    assert len(hits) == 1, f"window found {len(hits)} times"
    return hits[0]
