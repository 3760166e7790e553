"""The batch schema: each field's dtype and logical axes, declared once.

The stream batcher packs its arrays through `pack`, the placement module derives the
batch shardings and the abstract batch (for AOT compilation) from `FIELDS`; a new field is
added here and nowhere else.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Field:
    """One batch array: its dtype and the logical name of each dimension."""

    dtype: type
    axes: tuple[str, ...]


ROWS_BY_LENGTH = ("batch", "length")

FIELDS = {
    # Token ids [batch, seq_len]: reuse block, A <sep> B <sep> <cls>.
    "input_ids": Field(np.int32, ROWS_BY_LENGTH),
    # Segment ids [batch, seq_len]: 0 reuse+A+<sep>, 1 B+<sep>, 2 <cls>.
    "seg_ids": Field(np.int32, ROWS_BY_LENGTH),
    # Whether each token starts a word in forward text (the PLM aligns spans to these).
    "is_word_start": Field(np.bool_, ROWS_BY_LENGTH),
    # <sep>, <cls>, <pad>: never predicted.
    "is_functional": Field(np.bool_, ROWS_BY_LENGTH),
    # [batch]: rows that read their stream backward (bi_data).
    "is_backward": Field(np.bool_, ("batch",)),
}


def shape(field: Field, rows: int, seq_len: int) -> tuple[int, ...]:
    """The shape of `field` in a batch of `rows` rows of `seq_len` tokens."""
    sizes = {"batch": rows, "length": seq_len}
    return tuple(sizes[axis] for axis in field.axes)


def pack(**arrays: np.ndarray) -> dict[str, np.ndarray]:
    """The batch dict of exactly the schema's fields, each in its declared dtype."""
    assert arrays.keys() == FIELDS.keys(), sorted(arrays.keys() ^ FIELDS.keys())
    return {name: np.asarray(arrays[name], field.dtype) for name, field in FIELDS.items()}
