"""Where each document goes, in which order, and which sentences train the tokenizer.

Each is a pure function of a document's identity, so one process and a distributed
pipeline (data/beam_prepare.py) decide the same way without a global count or shared
random state:

  - identity: (input position, document index within that input), packed into one int,
    the document's key; the corpus keeps documents in key order (inputs in the order
    given, documents in file order), which the contiguous streams rely on;
  - split: a document is held out for validation when a 64-bit hash of (seed, key) falls
    below fraction * 2**64. If that holds out none (or all) of the documents, the one of
    smallest (largest) hash goes to validation (train), so both splits have one: a
    decision that needs only the count, min and max over documents (SplitTally);
  - tokenizer sample: a sentence trains SentencePiece when a hash of (key, its index in
    the document) falls below cap / sentences * 2**64: about `cap` sentences, drawn
    uniformly, fed in key order.

Hashes are blake2b (not Python's hash(), which is salted per process).
"""

import dataclasses
import hashlib
import struct

from xlnet_jax.errors import DataError

INDEX_BITS = 40  # documents per input < 2**40; inputs < 2**23 keep keys in int64
_SCALE = 2**64


def document_key(source: int, index: int) -> int:
    """The key of document `index` of input `source`: sorts by input, then file order."""
    return source << INDEX_BITS | index


def _hash64(salt: bytes, *values: int) -> int:
    data = struct.pack(f"<{len(values)}q", *values)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=salt).digest(), "little")


def split_hash(seed: int, key: int) -> int:
    """The document's draw for the train/validation choice, in [0, 2**64)."""
    return _hash64(b"xlnet-validation", seed, key)


def in_tokenizer_sample(key: int, sentence: int, sentences: int, cap: int) -> bool:
    """Whether sentence `sentence` of document `key` is among the ~cap that train the
    tokenizer, out of `sentences` in the corpus (exact integer comparison)."""
    return _hash64(b"xlnet-spm-sample", key, sentence) * sentences < cap * _SCALE


@dataclasses.dataclass(frozen=True)
class SplitTally:
    """What the split decision needs from all documents: their count, how many fall
    below the threshold, and the (hash, key) of smallest and largest hash."""

    count: int = 0
    below: int = 0
    smallest: tuple[int, int] | None = None
    largest: tuple[int, int] | None = None

    def add(self, draw: int, key: int, threshold: int) -> "SplitTally":
        return self.merge(SplitTally(1, int(draw < threshold), (draw, key), (draw, key)))

    def merge(self, other: "SplitTally") -> "SplitTally":
        pairs = [p for p in (self.smallest, other.smallest) if p]
        tops = [p for p in (self.largest, other.largest) if p]
        return SplitTally(
            self.count + other.count,
            self.below + other.below,
            min(pairs) if pairs else None,
            max(tops) if tops else None,
        )


def threshold(fraction: float) -> int:
    """Draws below this are held out."""
    return int(fraction * _SCALE)


@dataclasses.dataclass(frozen=True)
class SplitRule:
    """held_out(draw, key): the split of each document, once the tally is known."""

    threshold: int
    always: int | None = None  # the key held out whatever its draw
    never: int | None = None  # the key kept for training whatever its draw

    def held_out(self, draw: int, key: int) -> bool:
        if key == self.always:
            return True
        if key == self.never:
            return False
        return draw < self.threshold


def split_rule(fraction: float, tally: SplitTally) -> SplitRule:
    """The rule for a corpus whose documents gave `tally`; refuses one of one document."""
    if fraction == 0:
        return SplitRule(0)
    if tally.count < 2:
        raise DataError(
            "The corpus has a single document, which cannot be split into train and "
            "validation; add documents (a blank line ends one) or pass validation_fraction=0."
        )
    limit = threshold(fraction)
    if tally.below == 0:
        return SplitRule(limit, always=tally.smallest[1])
    if tally.below == tally.count:
        return SplitRule(limit, never=tally.largest[1])
    return SplitRule(limit)
