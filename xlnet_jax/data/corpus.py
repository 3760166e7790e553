"""A prepared split, or one range of it, as two flat arrays: the tokens and sentence starts.

Read once through tfds's data source (no tensorflow) and cached as .npy files in
corpus_dir/cache/, named by the manifest fingerprint (and the range); later loads
memory-map the cache, so processes on one host share the pages.

Ranges. With config.data_ranges = R > 1 a split's shards (the tfds dataset's array_record
files, documents in corpus order) are cut into R contiguous groups of whole shards, range k
holding shards [k*S // R, (k+1)*S // R) of S; a process reads (and, for a corpus staged
from object storage, downloads) only the shards of the ranges its rows need, and caches
each range on its own. A split with fewer shards than ranges (tfds writes one shard below
128 MiB of records) is one range, read whole as before ranges existed. Shards hold equal
numbers of documents, so ranges are equal in tokens only on average.

Memory: 4 bytes per token plus 8 per sentence (about 4.3 bytes per token for ~25-token
sentences) per split or range, e.g. ~4.3 GB for a 1B-token corpus, paged in from the
cache. Building the cache the first time holds the range twice, briefly.
"""

import dataclasses
import os

import numpy as np

from xlnet_jax.data import staging, tfds_builder
from xlnet_jax.data.manifest import Manifest, manifest_fingerprint
from xlnet_jax.data.tokenizer import EOD_ID
from xlnet_jax.errors import DataError


@dataclasses.dataclass(frozen=True)
class FlatSplit:
    """tokens: int32 [N], documents in corpus order, each followed by <eod>.
    sentence_starts: int64 [S], sorted positions where a sentence begins; the first is 0.
    A document's <eod> belongs to its last sentence."""

    tokens: np.ndarray
    sentence_starts: np.ndarray


@dataclasses.dataclass(frozen=True)
class Shards:
    """A split's array_record files in corpus order.

    Attributes:
      files: each shard's path relative to the corpus directory.
      lengths: documents in each shard.
    """

    files: tuple[str, ...]
    lengths: tuple[int, ...]

    def ranges(self, parts: int) -> int:
        """How many ranges the split is read in for config.data_ranges = `parts`: `parts`
        when every range gets at least one shard, else 1 (the split read whole)."""
        return parts if len(self.files) >= parts else 1

    def of_range(self, part: int, parts: int) -> tuple[slice, tuple[int, int]]:
        """The shards of range `part` of `parts` and the documents [first, end) they hold."""
        count = len(self.files)
        shards = slice(part * count // parts, (part + 1) * count // parts)
        first = sum(self.lengths[: shards.start])
        return shards, (first, first + sum(self.lengths[shards]))


def split_shards(manifest: Manifest, split: str) -> Shards:
    """The shards of `split`, from the dataset's metadata (dataset_info.json)."""
    info = tfds_builder.open_builder(manifest.path).info
    if split not in info.splits:
        raise DataError(
            f"Corpus {manifest.path} has no {split!r} split (it has {sorted(info.splits.keys())})."
            " Prepare it with a validation_fraction > 0 to get a validation split."
        )
    directory = os.path.relpath(tfds_builder.dataset_dir(manifest.path), manifest.path)
    split_info = info.splits[split]
    return Shards(
        tuple(os.path.join(directory, name) for name in split_info.filenames),
        tuple(int(n) for n in split_info.shard_lengths),
    )


def load_split(manifest: Manifest, split: str, part: int = 0, parts: int = 1) -> FlatSplit:
    """Range `part` of `parts` of the split (parts=1: all of it) as flat arrays, from the
    cache when present, else read (staging its shards first) and cached.

    `parts` must be 1 or split_shards(...).ranges(parts).
    """
    name = f"{manifest_fingerprint(manifest)[:16]}-{split}"
    if parts > 1:
        name += f"-{part}of{parts}"
    base = os.path.join(manifest.path, "cache", name)
    paths = (base + "-tokens.npy", base + "-starts.npy")
    if all(os.path.exists(p) for p in paths):
        return FlatSplit(*(np.load(p, mmap_mode="r") for p in paths))
    flat = _flatten(_read_range(manifest, split, part, parts))
    try:
        os.makedirs(os.path.dirname(base), exist_ok=True)
        for path, array in zip(paths, (flat.tokens, flat.sentence_starts), strict=True):
            tmp = f"{path}.{os.getpid()}.tmp.npy"
            np.save(tmp, array)
            os.replace(tmp, path)  # atomic: other processes see all of it or nothing
    except OSError:
        pass  # a read-only corpus works, uncached
    return flat


def _read_range(manifest: Manifest, split: str, part: int, parts: int):
    """The documents of range `part` of `parts`, with its shards staged when the corpus is
    a staged copy (staging.stage_files)."""
    shards = split_shards(manifest, split)
    if parts == 1:
        staging.stage_files(manifest, shards.files)
        yield from tfds_builder.read_documents(manifest.path, split)
        return
    if shards.ranges(parts) != parts:
        raise DataError(
            f"The {split!r} split of {manifest.path} has {len(shards.files)} shards, fewer "
            f"than the {parts} ranges asked for."
        )
    files, (first, end) = shards.of_range(part, parts)
    staging.stage_files(manifest, shards.files[files])
    builder = tfds_builder.open_builder(manifest.path)
    source = builder.as_data_source(split=f"{split}[{first}:{end}]")
    for start in range(0, len(source), 512):
        for example in source.__getitems__(list(range(start, min(start + 512, len(source))))):
            yield example["tokens"], example["sentence_lengths"]


def _flatten(documents) -> FlatSplit:
    """Joins the documents, each followed by <eod>, into one stream."""
    tokens, starts, offset = [], [], 0
    eod = np.array([EOD_ID], dtype=np.int32)
    for doc_tokens, lengths in documents:
        tokens += [doc_tokens, eod]
        starts.append(offset + np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]))
        offset += len(doc_tokens) + 1
    return FlatSplit(np.concatenate(tokens), np.concatenate(starts).astype(np.int64))


def unigram_counts(manifest: Manifest, split: str, vocab_size: int) -> np.ndarray:
    """How often each piece id occurs in `split`, int64 [vocab_size]."""
    return np.bincount(load_split(manifest, split).tokens, minlength=vocab_size)


def cross_entropy(probs: np.ndarray, model: np.ndarray) -> float:
    """-sum(probs * log(model)) in nats: the entropy of `probs` where `model` is `probs`."""
    return float(-(probs * np.log(model)).sum())


def unigram_entropy(manifest: Manifest, vocab_size: int) -> float:
    """Entropy in nats of the train split's unigram distribution: the loss a model that
    ignores all context would reach, the baseline a PLM's held-out loss should beat."""
    counts = unigram_counts(manifest, "train", vocab_size)
    probs = counts[counts > 0] / counts.sum()
    return cross_entropy(probs, probs)
