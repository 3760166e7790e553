"""A prepared split as two flat arrays: the token stream and its sentence starts.

Read once through tfds's data source (no tensorflow) and cached as .npy files in
corpus_dir/cache/, named by the manifest fingerprint; later loads memory-map the cache,
so processes on one host share the pages.

Memory: 4 bytes per token plus 8 per sentence (about 4.3 bytes per token for ~25-token
sentences) per split, e.g. ~4.3 GB for a 1B-token corpus, paged in from the cache.
Building the cache the first time holds the split twice, briefly.
"""

import dataclasses
import os

import numpy as np

from xlnet_jax.data import tfds_builder
from xlnet_jax.data.manifest import Manifest, manifest_fingerprint
from xlnet_jax.data.tokenizer import EOD_ID


@dataclasses.dataclass(frozen=True)
class FlatSplit:
    """tokens: int32 [N], documents in corpus order, each followed by <eod>.
    sentence_starts: int64 [S], sorted positions where a sentence begins; the first is 0.
    A document's <eod> belongs to its last sentence."""

    tokens: np.ndarray
    sentence_starts: np.ndarray


def load_split(manifest: Manifest, split: str) -> FlatSplit:
    """The split as flat arrays, from the cache when present, else built and cached."""
    base = os.path.join(manifest.path, "cache", f"{manifest_fingerprint(manifest)[:16]}-{split}")
    paths = (base + "-tokens.npy", base + "-starts.npy")
    if all(os.path.exists(p) for p in paths):
        return FlatSplit(*(np.load(p, mmap_mode="r") for p in paths))
    flat = _flatten(manifest.path, split)
    try:
        os.makedirs(os.path.dirname(base), exist_ok=True)
        for path, array in zip(paths, (flat.tokens, flat.sentence_starts), strict=True):
            tmp = f"{path}.{os.getpid()}.tmp.npy"
            np.save(tmp, array)
            os.replace(tmp, path)  # atomic: other processes see all of it or nothing
    except OSError:
        pass  # a read-only corpus works, uncached
    return flat


def _flatten(corpus_dir: str, split: str) -> FlatSplit:
    """Joins the split's documents, each followed by <eod>, into one stream."""
    tokens, starts, offset = [], [], 0
    eod = np.array([EOD_ID], dtype=np.int32)
    for doc_tokens, lengths in tfds_builder.read_documents(corpus_dir, split):
        tokens += [doc_tokens, eod]
        starts.append(offset + np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]))
        offset += len(doc_tokens) + 1
    return FlatSplit(np.concatenate(tokens), np.concatenate(starts).astype(np.int64))


def unigram_entropy(manifest: Manifest, vocab_size: int) -> float:
    """Entropy in nats of the train split's unigram distribution: the loss a model that
    ignores all context would reach, the baseline a PLM's held-out loss should beat."""
    counts = np.bincount(load_split(manifest, "train").tokens, minlength=vocab_size)
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * np.log(probs)).sum())
