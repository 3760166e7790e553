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

Ranges (config.data_ranges = R). Each of the split's R ranges (corpus.py: contiguous
groups of whole shards) is a ring of its own, holding n / R of the streams: stream s lives
in range s // (n / R). Everything above happens inside the row's range: its reuse blocks,
A, and B, the continuation or the span from "the rest of the ring", which is the rest of
the range's ring; the seed rotates and assigns streams within each range. Streams follow
rows and rows follow processes in order, so with R a multiple of the process count each
process reads R / P ranges and no other, and the batches do not depend on P. R = 1 is the
whole split, as before ranges existed (same batches, bit for bit).

Mixtures (data/mixture.py). With several corpora the n / R streams of each range block
are shared out among them the same way in every block (mixture.apportion): the first c_0
streams of a block are corpus 0's, the next c_1 corpus 1's, and so on; corpus i's streams,
block after block, are its own R * c_i streams, laid out on its own rings exactly as above
(its range k read by block k), seeded by (seed, split, corpus index). A row stays in its
corpus for the run, so its memory is always its true left context, and each process reads
R / P ranges of every corpus. One corpus is the layout above, bit for bit.

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

import dataclasses
import logging
import zlib
from collections.abc import Sequence

import numpy as np

from xlnet_jax.data import batch_schema, mixture, tokenizer
from xlnet_jax.data.corpus import load_split, split_shards
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.errors import DataError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Range:
    """One range's ring, as far as this process's rows read it.

    Attributes:
      tokens: the range's flat tokens (n of them).
      sentences: sorted sentence starts of the ring read forward, and read backward.
      rows: which of this process's rows read this range.
    """

    tokens: np.ndarray
    sentences: tuple[np.ndarray, np.ndarray]
    rows: np.ndarray

    @property
    def n(self) -> int:
        return len(self.tokens)


class StreamBatcher:
    """This process's rows of the batch of any step, for one split of a prepared corpus, or
    of a mixture of corpora (data/mixture.py: each corpus holds fixed streams).

    Attributes:
      manifest: the (first) corpus's manifest.
      manifests: every corpus's manifest, in config.corpus_dir order.
      names: each corpus's short name (mixture.corpus_names), for logs and metrics.
      shares: float64 [corpora]: the share of the streams each corpus was given (p_i).
      streams_per_corpus: int64 [corpora]: streams of each corpus in every batch (the rows
        of each, halved with bi_data), fixed for the run.
      row_corpus: int32 [global_batch]: the corpus of every global row.
      num_tokens: tokens of the rings this process reads (N, the split's, for one range).
      ranges: how many ranges the (first) split is read in (1, or data_ranges; corpus.py).
      local_batch: rows this process produces (global_batch / process_count).
    """

    def __init__(
        self,
        corpus_dir: str | Sequence[str],
        split: str,
        *,
        seq_len: int,
        reuse_len: int,
        global_batch: int,
        bi_data: bool,
        seed: int,
        next_sentence_prob: float = 0.5,
        num_data_shards: int = 1,
        data_ranges: int = 1,
        process_index: int = 0,
        process_count: int = 1,
        corpus_weights: Sequence[float] | None = None,
        corpus_alpha: float = 0.0,
        names: Sequence[str] | None = None,
    ):
        """Loads the split (see corpus.load_split for memory) and places the streams.

        Args:
          corpus_dir: a directory written by prepare_corpus, or several (a list, or one
            string of comma-separated directories): a mixture, one tokenizer.
          split: "train" or "validation".
          seq_len: tokens per row (L).
          reuse_len: tokens of the reuse block (R); the streams advance R per step.
          global_batch: rows per step over all processes.
          bi_data: half of each data shard's rows are the same streams reversed.
          seed: places the streams and draws the A/B cuts.
          next_sentence_prob: probability that B is the true continuation of A.
          num_data_shards: contiguous row groups that each hold forward + backward halves.
          data_ranges: contiguous ranges of the split's shards, each a ring of its own
            streams (see the module doc); the streams must divide by it.
          process_index, process_count: this process gets rows
            [process_index * b, (process_index + 1) * b), b = global_batch / process_count.
          corpus_weights, corpus_alpha: a mixture's shares (mixture.shares), from the train
            splits' token counts whichever split is read, so both splits place alike.
          names: the corpora's names (default: mixture.corpus_names of the directories).
        """
        _check_shape(
            seq_len,
            reuse_len,
            global_batch,
            bi_data,
            next_sentence_prob,
            num_data_shards,
            data_ranges,
            process_index,
            process_count,
        )
        dirs = mixture.corpus_dirs(corpus_dir) if isinstance(corpus_dir, str) else list(corpus_dir)
        self.manifests = [load_manifest(d) for d in dirs]
        self.manifest = self.manifests[0]
        for other in self.manifests[1:]:
            line = mixture.tokenizer_difference(self.manifest, other)
            if line:
                raise DataError(line)
        self.names = list(names) if names else mixture.corpus_names(dirs)
        word_start, functional = tokenizer.piece_tables(
            tokenizer.load_processor(self.manifest.tokenizer_path), self.manifest.word_starts
        )
        self._word_start, self._functional = word_start, functional
        self._seq_len, self._reuse_len = seq_len, reuse_len
        self._global_batch, self._next_prob = global_batch, next_sentence_prob
        self._salt = [seed, zlib.crc32(split.encode())]
        self._split = split
        self.local_batch = global_batch // process_count

        num_streams = global_batch // 2 if bi_data else global_batch
        per_block = num_streams // data_ranges  # the streams of one range block
        tokens = [m.splits.get("train", {}).get("tokens", 0) for m in self.manifests]
        self.shares, counts = mixture.block_counts(
            tokens,
            corpus_weights,
            corpus_alpha,
            global_batch=global_batch,
            bi_data=bi_data,
            data_ranges=data_ranges,
        )
        self.streams_per_corpus = counts * data_ranges
        offsets = np.concatenate([[0], np.cumsum(counts)])
        everyone, _ = _row_streams(np.arange(global_batch), global_batch, bi_data, num_data_shards)
        self.row_corpus = (np.searchsorted(offsets[1:], everyone % per_block, "right")).astype(
            np.int32
        )

        rows = np.arange(process_index * self.local_batch, (process_index + 1) * self.local_batch)
        stream, self._backward = _row_streams(rows, global_batch, bi_data, num_data_shards)
        block, within = np.divmod(stream, per_block)
        corpus_of_row = self.row_corpus[rows]
        self._start = np.empty(len(rows), dtype=np.int64)
        self._parts = []
        self.corpus_ranges = []
        for i, manifest in enumerate(self.manifests):
            ranges = _ranges(manifest, split, data_ranges)
            self.corpus_ranges.append(ranges)
            of_corpus = corpus_of_row == i
            # The corpus's own stream index: its streams, block after block.
            j = np.full(len(rows), -1, dtype=np.int64)
            j[of_corpus] = block[of_corpus] * counts[i] + within[of_corpus] - offsets[i]
            # One corpus keeps the seeding from before mixtures, so its batches are unchanged.
            salt = self._salt if len(dirs) == 1 else [*self._salt, 0, len(dirs), i]
            self._place(manifest, dirs[i], split, j, of_corpus, int(counts[i]) * data_ranges,
                        ranges, num_streams, salt, process_index, process_count)  # fmt: skip
        self.ranges = self.corpus_ranges[0]
        self.num_tokens = sum(part.n for part in self._parts)
        self._rows = rows

    def _place(
        self, manifest, corpus_dir, split, j, of_corpus, streams, ranges, num_streams, salt,
        process_index, process_count,
    ) -> None:  # fmt: skip
        """Places this process's rows of one corpus (those in `of_corpus`, its stream j of
        `streams`) on that corpus's rings, one per range, loading only the ranges read."""
        if not of_corpus.any():
            return
        per_range = streams // ranges
        range_of_row = np.where(of_corpus, j // per_range, -1)
        needed = np.unique(range_of_row[of_corpus])
        _check_share(len(needed), ranges, num_streams, process_index, process_count)
        for part in needed:
            flat = load_split(manifest, split, int(part), ranges)
            n = len(flat.tokens)
            _check_size(n, per_range, self._reuse_len, self._seq_len, corpus_dir, split, part,
                        ranges)  # fmt: skip
            # One range keeps the seeding from before ranges, so its batches are unchanged.
            rng = np.random.default_rng(salt if ranges == 1 else [*salt, ranges, int(part)])
            stream_len = n // per_range
            mine = range_of_row == part
            rotation = rng.integers(n)
            place = rng.permutation(per_range)[j[mine] - part * per_range]
            start = (rotation + place * stream_len) % n
            # Backward rows read the reversed ring (position q there is n - 1 - q here),
            # from the stream's last token on.
            backward = self._backward[mine]
            self._start[mine] = np.where(backward, (n - start - stream_len) % n, start)
            starts = np.asarray(flat.sentence_starts)
            self._parts.append(_Range(flat.tokens, (starts, np.sort((n - starts) % n)), mine))

    def tokens_seen(self, steps_done: int) -> dict[str, int]:
        """Corpus name -> new tokens all processes together have read of it in the first
        `steps_done` steps: each stream reads reuse_len a step (bi_data's backward rows
        reread their stream's text reversed, so they add none). A function of the layout
        alone, the same on every process and after a resume."""
        return {
            name: int(streams) * self._reuse_len * int(steps_done)
            for name, streams in zip(self.names, self.streams_per_corpus, strict=True)
        }

    def describe(self, num_steps: int, dirs: Sequence[str] | None = None) -> list[str]:
        """One line per corpus for the start of a run: its weight (share asked), its share
        of the rows, its tokens and the epochs `num_steps` steps read of it; `dirs` names
        the corpora as the user did (default: their manifests' paths, staged copies')."""
        total = int(self.streams_per_corpus.sum())
        seen = self.tokens_seen(num_steps)
        lines = []
        for i, name in enumerate(self.names):
            manifest = self.manifests[i]
            n = manifest.splits.get(self._split, {}).get("tokens", 0)
            streams = int(self.streams_per_corpus[i])
            epochs = seen[name] / max(n, 1)
            where = dirs[i] if dirs else manifest.path
            line = (
                f"corpus {name} ({where}): weight {self.shares[i]:.3f}, "
                f"{streams} of {total} streams a step ({streams / total:.1%} of the rows), "
                f"{n:,} {self._split} tokens, {epochs:.2f} epochs in {num_steps:,} steps"
            )
            if epochs > 1:
                line += f"; a small corpus: {name} is read {epochs:.1f} times over"
            lines.append(line + ".")
        return lines

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of step `step`'s batch.

        Returns:
          input_ids: int32 [b, L]; seg_ids: int32 [b, L] (0 reuse+A+<sep>, 1 B+<sep>,
          2 <cls>); is_word_start: bool [b, L] (forward-text flag of each token, see the
          module doc); is_functional: bool [b, L] (<sep>, <cls>, <pad>); is_backward: bool
          [b]. b = local_batch, L = seq_len.
        """
        u = np.random.default_rng([*self._salt, step]).random((3, self._global_batch))
        u = u[:, self._rows]
        ids = np.empty((self.local_batch, self._seq_len), dtype=np.int32)
        cut = np.empty((self.local_batch, 1), dtype=np.int64)
        for part in self._parts:
            rows = part.rows
            ids[rows], cut[rows] = self._read(part, step, self._start[rows], u[:, rows])
        ids[:, -2] = tokenizer.SEP_ID
        ids[:, -1] = tokenizer.CLS_ID
        seg = (np.arange(self._seq_len) > cut).astype(np.int32)
        seg[:, -1] = 2
        return batch_schema.pack(
            input_ids=ids,
            seg_ids=seg,
            is_word_start=self._word_start[ids],
            is_functional=self._functional[ids],
            is_backward=self._backward.copy(),
        )

    def _read(self, part: _Range, step: int, start: np.ndarray, u: np.ndarray):
        """Token ids [rows, L] (before the closing <sep> <cls>) and the first <sep>'s
        position [rows, 1] of `part`'s rows at `step`; u holds their uniform draws."""
        n, length, reuse = part.n, self._seq_len, self._reuse_len
        room = length - reuse - 3  # tokens for A and B together
        u_cut, u_next, u_other = u
        backward = self._backward[part.rows]
        p = (start + step * reuse) % n  # reuse block start, in the row's direction
        a = p + reuse
        a_end = np.empty_like(a)
        b_begin = np.empty_like(a)
        for direction, starts in zip((False, True), part.sentences, strict=True):
            rows = backward == direction
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
        q = np.where(backward[:, None], n - 1 - q, q)
        ids = np.asarray(part.tokens[q], dtype=np.int32)
        return np.where(j == cut, tokenizer.SEP_ID, ids), cut


def _ranges(manifest, split: str, data_ranges: int) -> int:
    """The ranges `split` is read in: data_ranges, or 1 (with a warning) for a split with
    fewer shards than that, e.g. one prepared before ranges or under 128 MiB (one shard)."""
    if data_ranges == 1:
        return 1
    shards = split_shards(manifest, split)
    if shards.ranges(data_ranges) == 1:
        log.warning(
            "config.data_ranges=%d: the %r split of %s has %d shard(s), fewer than the "
            "ranges, so every process reads all of it.",
            data_ranges,
            split,
            manifest.path,
            len(shards.files),
        )
    return shards.ranges(data_ranges)


def _check_share(needed: int, ranges, num_streams, process_index, process_count) -> None:
    """Refuses a layout in which a process reads more than its share of the ranges (so
    stages and caches more than its share of the corpus)."""
    share = max(1, ranges // process_count)
    if needed <= share:
        return
    working = [
        r
        for r in range(1, num_streams + 1)
        if num_streams % r == 0 and (r % process_count == 0 or process_count % r == 0)
    ]
    raise DataError(
        f"config.data_ranges={ranges}: the rows of process {process_index} of {process_count} "
        f"read {needed} of the {ranges} ranges, more than its share of {share}; use a "
        f"data_ranges that divides the {num_streams} streams and is a multiple or divisor of "
        f"the process count: {', '.join(map(str, working))}."
    )


def _check_size(n, per_range, reuse_len, seq_len, corpus_dir, split, part, ranges) -> None:
    """Refuses a ring too small for its streams, naming what to change."""
    need = max(per_range * reuse_len, 2 * seq_len)
    if n >= need:
        return
    where = f"The {split!r} split of {corpus_dir}"
    if ranges > 1:
        where = f"Range {part} of {ranges} (config.data_ranges) of the {split!r} split of "
        where += corpus_dir
    raise DataError(
        f"{where} has {n:,} tokens, too few for one step: {per_range} streams of at least "
        f"reuse_len={reuse_len} tokens and rows of seq_len={seq_len} need {need:,}. Use a "
        "smaller batch_size, reuse_len, seq_len or data_ranges, add text, or (for "
        "validation) prepare with a larger validation_fraction."
    )


def _check_shape(
    seq_len,
    reuse_len,
    global_batch,
    bi_data,
    next_sentence_prob,
    num_data_shards,
    data_ranges,
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
    num_streams = global_batch // 2 if bi_data else global_batch
    if data_ranges < 1 or num_streams % data_ranges:
        problems.append(
            f"data_ranges ({data_ranges}) must be >= 1 and divide the {num_streams} streams "
            "of a batch (batch_size, halved with bi_data)"
        )
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
