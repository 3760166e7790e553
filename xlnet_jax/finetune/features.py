"""Rows as XLNet's classifier builds them: A <sep> B <sep> <cls>, padded on the LEFT.

Token types as the original's classifier_utils: A (and its <sep>) 0, B (and its <sep>) 1,
<cls> 2, padding 4; only equality matters to the model. <cls> is the last position, where the
head reads. Padding takes the <pad> id (HF's tokenizer; the original used 0, which the mask
hides all the same).

A text longer than one row is read as S consecutive segments of seq_len (num_segments):
the row of S * seq_len positions is cut into S segments in order, the last ending in <cls>,
and the model carries the recurrence memory from one to the next. Truncation, when even that
is too short, is the original's: the longer of A and B loses its last token, one at a time.
"""

import numpy as np

from xlnet_jax.data.tokenizer import CLS_ID, PAD_ID, SEP_ID

SEG_A, SEG_B, SEG_CLS, SEG_PAD = 0, 1, 2, 4


def truncate_pair(a: list[int], b: list[int], max_length: int) -> tuple[list[int], list[int]]:
    """A and B cut to max_length tokens together, always from the end of the longer one."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_length:
        (a if len(a) > len(b) else b).pop()
    return a, b


def pair_row(
    a: list[int], b: list[int] | None, seq_len: int, num_segments: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One example as (input_ids, seg_ids, input_mask), each [num_segments, seq_len].

    Without B, or with an empty B: A <sep> <cls> (the original's classifier_utils tests B's
    truth); with B: A <sep> B <sep> <cls>; both cut to fit, then padded on the left to
    num_segments * seq_len.
    """
    capacity = seq_len * num_segments
    if not b:
        a, b = list(a[: capacity - 2]), []
        tokens = [*a, SEP_ID, CLS_ID]
        types = [SEG_A] * (len(a) + 1) + [SEG_CLS]
    else:
        a, b = truncate_pair(a, b, capacity - 3)
        tokens = [*a, SEP_ID, *b, SEP_ID, CLS_ID]
        types = [SEG_A] * (len(a) + 1) + [SEG_B] * (len(b) + 1) + [SEG_CLS]
    pad = capacity - len(tokens)
    ids = np.array([PAD_ID] * pad + tokens, np.int32)
    seg = np.array([SEG_PAD] * pad + types, np.int32)
    mask = np.arange(capacity) < pad
    shape = (num_segments, seq_len)
    return ids.reshape(shape), seg.reshape(shape), mask.reshape(shape)


def input_spec(config, rows: tuple[int, ...] = ()) -> dict[str, tuple[tuple, str]]:
    """The input arrays' (shape without the batch axis, dtype): [S, *rows, L]."""
    shape = (config.num_segments, *rows, config.seq_len)
    return {
        "input_ids": (shape, "int32"),
        "seg_ids": (shape, "int32"),
        "input_mask": (shape, "bool"),
    }


def stack_rows(rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """pair_row results -> {"input_ids", "seg_ids", "input_mask"}, stacked on a new axis 0."""
    ids, seg, mask = zip(*rows, strict=True) if rows else ((), (), ())
    return {
        "input_ids": np.stack(ids).astype(np.int32),
        "seg_ids": np.stack(seg).astype(np.int32),
        "input_mask": np.stack(mask).astype(bool),
    }
