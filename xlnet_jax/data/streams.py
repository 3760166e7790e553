"""Recurrent batch streams: the batch of step t as a pure function of (corpus, seed, t).

Layout. A split's tokens form one stream (documents joined, each ending in <eod>), read as
a ring: after its last token comes its first, so every position has a true left context
and wrapping around (a new epoch) happens at a document boundary. The ring is cut into
`n` contiguous streams (n = global_batch, or global_batch / 2 with bi_data), of
M = N // n tokens each; the seed rotates the ring and assigns streams to rows.

Step t, row r (stream start s): the reuse block is ring tokens [s + t*R, s + (t+1)*R),
followed by `A <sep> B <sep> <cls>` to fill seq_len L:
  - A is the text right after the reuse block, ending at a sentence boundary picked
    uniformly among those that leave room for B (if the window holds none, the sentence
    is longer than the window and A ends at a random token instead);
  - with probability next_sentence_prob (and a boundary to cut at) B is the true
    continuation of A, else a span starting at a sentence start drawn uniformly from the
    rest of the ring; B is trimmed to fill exactly L - R - 3 - len(A) tokens.
  seg_ids: reuse, A and the first <sep> are 0; B and the second <sep> 1; <cls> 2.
Row r's reuse block at step t+1 is the text right after its reuse block at step t, so the
model's memory is always the true left context; streams move, rows are never shuffled.
Rows are full: no padding. Randomness comes from (seed, split, step, global row), so a
process computes its rows alone and any step cold, without iterator state.

bi_data. The global batch is split into num_data_shards contiguous groups; in each group
the first half of the rows are forward streams and the second half the same streams
reversed: read from the stream's end toward its start, so the memory is the true context
in that direction. Everything above (sentence cuts, A, B) is done on the reversed text.
`is_backward` marks those rows.

is_word_start. The flag of each token as a piece of forward text: the piece begins a word
under the corpus's word-start rule (data.word_starts; a table lookup on the id). It is the
same flag whatever the row's direction, so a backward row carries its flags reversed with
its tokens; the PLM sampler flips a backward row to forward order before it aligns spans
to word starts, and flips the result back.
"""

import zlib

import numpy as np

from xlnet_jax.data import batch_schema, tokenizer
from xlnet_jax.data.corpus import load_split
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.errors import DataError


class StreamBatcher:
    """This process's rows of the batch of any step, for one split of a prepared corpus.

    Attributes:
      manifest: the corpus manifest.
      num_tokens: N, tokens in the split's stream.
      local_batch: rows this process produces (global_batch / process_count).
    """

    def __init__(
        self,
        corpus_dir: str,
        split: str,
        *,
        seq_len: int,
        reuse_len: int,
        global_batch: int,
        bi_data: bool,
        seed: int,
        next_sentence_prob: float = 0.5,
        num_data_shards: int = 1,
        process_index: int = 0,
        process_count: int = 1,
    ):
        """Loads the split (see corpus.load_split for memory) and places the streams.

        Args:
          corpus_dir: a directory written by prepare_corpus.
          split: "train" or "validation".
          seq_len: tokens per row (L).
          reuse_len: tokens of the reuse block (R); the streams advance R per step.
          global_batch: rows per step over all processes.
          bi_data: half of each data shard's rows are the same streams reversed.
          seed: places the streams and draws the A/B cuts.
          next_sentence_prob: probability that B is the true continuation of A.
          num_data_shards: contiguous row groups that each hold forward + backward halves.
          process_index, process_count: this process gets rows
            [process_index * b, (process_index + 1) * b), b = global_batch / process_count.
        """
        _check_shape(
            seq_len,
            reuse_len,
            global_batch,
            bi_data,
            next_sentence_prob,
            num_data_shards,
            process_index,
            process_count,
        )
        self.manifest = load_manifest(corpus_dir)
        flat = load_split(self.manifest, split)
        self._tokens = flat.tokens
        word_start, functional = tokenizer.piece_tables(
            tokenizer.load_processor(self.manifest.tokenizer_path), self.manifest.word_starts
        )
        self._word_start, self._functional = word_start, functional
        self.num_tokens = n = len(flat.tokens)
        num_streams = global_batch // 2 if bi_data else global_batch
        need = max(num_streams * reuse_len, 2 * seq_len)
        if n < need:
            raise DataError(
                f"The {split!r} split of {corpus_dir} has {n:,} tokens, too few for one step: "
                f"{num_streams} streams of at least reuse_len={reuse_len} tokens and rows of "
                f"seq_len={seq_len} need {need:,}. Use a smaller batch_size, reuse_len or "
                f"seq_len, add text, or (for validation) prepare with a larger "
                "validation_fraction."
            )
        self._seq_len, self._reuse_len = seq_len, reuse_len
        self._global_batch, self._next_prob = global_batch, next_sentence_prob
        self._salt = [seed, zlib.crc32(split.encode())]
        self.local_batch = global_batch // process_count

        rows = np.arange(process_index * self.local_batch, (process_index + 1) * self.local_batch)
        stream, self._backward = _row_streams(rows, global_batch, bi_data, num_data_shards)
        rng = np.random.default_rng(self._salt)
        stream_len = n // num_streams
        start = (rng.integers(n) + rng.permutation(num_streams)[stream] * stream_len) % n
        # Backward rows read the reversed ring (position q there is N - 1 - q here), from
        # the stream's last token on.
        self._start = np.where(self._backward, (n - start - stream_len) % n, start)
        self._rows = rows
        starts = np.asarray(flat.sentence_starts)
        self._sentences = (starts, np.sort((n - starts) % n))  # forward, backward

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of step `step`'s batch.

        Returns:
          input_ids: int32 [b, L]; seg_ids: int32 [b, L] (0 reuse+A+<sep>, 1 B+<sep>,
          2 <cls>); is_word_start: bool [b, L] (forward-text flag of each token, see the
          module doc); is_functional: bool [b, L] (<sep>, <cls>, <pad>); is_backward: bool
          [b]. b = local_batch, L = seq_len.
        """
        n, length, reuse = self.num_tokens, self._seq_len, self._reuse_len
        room = length - reuse - 3  # tokens for A and B together
        u = np.random.default_rng([*self._salt, step]).random((3, self._global_batch))
        u_cut, u_next, u_other = u[:, self._rows]
        p = (self._start + step * reuse) % n  # reuse block start, in the row's direction
        a = p + reuse
        a_end = np.empty_like(a)
        b_begin = np.empty_like(a)
        for backward, starts in zip((False, True), self._sentences, strict=True):
            rows = self._backward == backward
            a_end[rows], b_begin[rows] = _cut_a_and_b(
                starts,
                n,
                a[rows],
                room,
                u_cut[rows],
                u_next[rows] < self._next_prob,
                u_other[rows],
            )
        j = np.arange(length)
        cut = (a_end - p)[:, None]  # position of the first <sep>
        q = np.where(j < cut, p[:, None] + j, b_begin[:, None] + (j - cut - 1)) % n
        q = np.where(self._backward[:, None], n - 1 - q, q)
        ids = np.asarray(self._tokens[q], dtype=np.int32)
        ids = np.where(j == cut, tokenizer.SEP_ID, ids)
        ids[:, -2] = tokenizer.SEP_ID
        ids[:, -1] = tokenizer.CLS_ID
        seg = (j > cut).astype(np.int32)
        seg[:, -1] = 2
        return batch_schema.pack(
            input_ids=ids,
            seg_ids=seg,
            is_word_start=self._word_start[ids],
            is_functional=self._functional[ids],
            is_backward=self._backward.copy(),
        )


def _check_shape(
    seq_len,
    reuse_len,
    global_batch,
    bi_data,
    next_sentence_prob,
    num_data_shards,
    process_index,
    process_count,
) -> None:
    """Refuses a layout the streams cannot produce, naming the config field."""
    problems = []
    if reuse_len < 1:
        problems.append(f"reuse_len must be >= 1 (the streams advance by it), got {reuse_len}")
    if seq_len - reuse_len - 3 < 2:
        problems.append(
            f"seq_len ({seq_len}) must exceed reuse_len ({reuse_len}) by at least 5: "
            "A, <sep>, B, <sep>, <cls>"
        )
    if global_batch < 1 or global_batch % process_count:
        problems.append(f"batch_size ({global_batch}) must divide by the {process_count} processes")
    if not 0 <= process_index < process_count:
        problems.append(f"process_index {process_index} is not in [0, {process_count})")
    if not 0 <= next_sentence_prob <= 1:
        problems.append(f"next_sentence_prob must be in [0, 1], got {next_sentence_prob}")
    if problems:
        raise DataError("Bad stream layout: " + "; ".join(problems) + ".")
    # validate.validate_batch_layout names the config field; the streams rely on it.
    assert not bi_data or global_batch % (2 * num_data_shards) == 0, "bi_data: odd rows per shard"


def _row_streams(rows, global_batch, bi_data, num_data_shards) -> tuple[np.ndarray, np.ndarray]:
    """Stream index and direction (True: backward) of each global row."""
    if not bi_data:
        return rows, np.zeros(len(rows), dtype=bool)
    group = global_batch // num_data_shards
    half = group // 2
    within = rows % group
    return rows // group * half + within % half, within >= half


def _cut_a_and_b(starts, n, a, room, u_cut, want_next, u_other) -> tuple[np.ndarray, np.ndarray]:
    """End of A and start of B per row, as ring positions (may exceed n; callers take % n).

    starts are the sorted sentence starts in [0, n) of the direction read; positions
    beyond n refer to the ring's next turns (see _start_at / _search).
    """
    i0 = _search(starts, n, a, "right")  # first sentence start after a
    i1 = _search(starts, n, a + room, "left")  # first one at or after a + room
    cuts = i1 - i0  # sentence starts strictly inside (a, a + room)
    at_boundary = _start_at(starts, n, i0 + np.floor(u_cut * cuts).astype(np.int64))
    a_end = np.where(cuts > 0, at_boundary, a + 1 + np.floor(u_cut * (room - 1)).astype(np.int64))
    b_len = room - (a_end - a)
    # Elsewhere: a start position whose B window lies outside [a, a + room), snapped
    # forward to the next sentence start.
    x = a + room + np.floor(u_other * (n - room - b_len + 1)).astype(np.int64)
    other = _start_at(starts, n, _search(starts, n, x, "left"))
    return a_end, np.where((cuts > 0) & want_next, a_end, other)


def _search(starts, n, x, side) -> np.ndarray:
    """searchsorted over the ring's unrolled sentence starts (starts + k*n for k >= 0)."""
    return x // n * len(starts) + np.searchsorted(starts, x % n, side=side)


def _start_at(starts, n, i) -> np.ndarray:
    """The i-th unrolled sentence start."""
    return starts[i % len(starts)] + i // len(starts) * n
