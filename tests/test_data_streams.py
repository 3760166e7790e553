"""The recurrent batch streams: continuity, layout, bi_data reversal, determinism."""

import re
import shutil
import zlib

import numpy as np
import pytest
from test_data_common import ring_position, ring_positions, small_corpus

from tests.sharded_corpus import sharded_corpus
from xlnet_jax.data.corpus import load_split
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.data.streams import StreamBatcher
from xlnet_jax.data.tokenizer import CLS_ID, SEP_ID, load_processor
from xlnet_jax.errors import DataError

SEQ, REUSE = 64, 16


def batcher(split="train", **overrides) -> StreamBatcher:
    kwargs = dict(seq_len=SEQ, reuse_len=REUSE, global_batch=4, bi_data=False, seed=0)
    return StreamBatcher(small_corpus(), split, **{**kwargs, **overrides})


def flat_tokens(split: str) -> np.ndarray:
    return np.asarray(load_split(load_manifest(small_corpus()), split).tokens)


def first_sep(ids: np.ndarray) -> int:
    return int(np.argmax(ids == SEP_ID))


def forward_starts(b: StreamBatcher, tokens: np.ndarray) -> list[int]:
    """Where each (forward) row's reuse block of step 0 lies in the ring, found from the
    text of its first ten reuse blocks (long enough to be unique)."""
    blocks = np.concatenate([b.batch(t)["input_ids"][:, :REUSE] for t in range(10)], axis=1)
    return [ring_position(tokens, row) for row in blocks]


def test_fields_shapes_and_dtypes():
    b = batcher(global_batch=6)
    x = b.batch(0)
    assert {k: (v.dtype, v.shape) for k, v in x.items()} == {
        "input_ids": (np.int32, (6, SEQ)),
        "seg_ids": (np.int32, (6, SEQ)),
        "is_word_start": (bool, (6, SEQ)),
        "is_functional": (bool, (6, SEQ)),
        "is_backward": (bool, (6,)),
    }


@pytest.mark.parametrize("bi_data", [False, True])
def test_reuse_blocks_continue_the_stream_across_the_wrap_around(bi_data):
    """Each row's reuse blocks, step after step, are one contiguous read of the ring.

    Every row reads more than the whole (validation) ring, so each crosses its end.
    """
    b = batcher("validation", bi_data=bi_data)
    tokens = flat_tokens("validation")
    steps = len(tokens) // REUSE + 20
    blocks = np.stack([b.batch(t)["input_ids"][:, :REUSE] for t in range(steps)], axis=1)
    for row, backward in enumerate(b.batch(0)["is_backward"]):
        ring = tokens[::-1] if backward else tokens
        read = blocks[row].reshape(-1)
        start = ring_position(ring, read[:64])
        np.testing.assert_array_equal(
            read, np.take(ring, start + np.arange(len(read)), mode="wrap")
        )


def test_next_reuse_block_starts_with_this_steps_A():
    """Black-box continuity: A follows the reuse block, and so does the next reuse block."""
    b = batcher()
    for t in range(20):
        now, nxt = b.batch(t)["input_ids"], b.batch(t + 1)["input_ids"]
        for row in range(len(now)):
            a = now[row, REUSE : first_sep(now[row])]
            k = min(len(a), REUSE)
            np.testing.assert_array_equal(nxt[row, :k], a[:k])


def test_row_layout_reuse_A_sep_B_sep_cls():
    b = batcher(global_batch=8)
    for t in range(10):
        x = b.batch(t)
        for ids, seg, functional in zip(
            x["input_ids"], x["seg_ids"], x["is_functional"], strict=True
        ):
            cut = first_sep(ids)
            assert REUSE < cut < SEQ - 3  # A and B each at least one token
            assert ids[-2] == SEP_ID and ids[-1] == CLS_ID
            assert set(np.nonzero(functional)[0]) == {cut, SEQ - 2, SEQ - 1}
            assert (seg[: cut + 1] == 0).all() and (seg[cut + 1 : -1] == 1).all() and seg[-1] == 2


@pytest.mark.parametrize("prob", [0.0, 1.0])
def test_b_is_the_true_continuation_with_next_sentence_prob(prob):
    """With p=1 a row whose window has a sentence boundary to cut A at reads on into B: its
    text (specials dropped) is one contiguous read of the ring. With p=0, B always starts
    elsewhere, at a sentence start."""
    b = batcher(global_batch=8, next_sentence_prob=prob)
    tokens = flat_tokens("train")
    starts = np.asarray(load_split(load_manifest(small_corpus()), "train").sentence_starts)
    ring = np.concatenate([starts, starts + len(tokens)])
    room = SEQ - REUSE - 3
    row_starts = forward_starts(b, tokens)
    checked = 0
    for t in range(5):
        for row, ids in enumerate(b.batch(t)["input_ids"]):
            cut = first_sep(ids)
            text = np.concatenate([ids[:cut], ids[cut + 1 : -2]])
            start = (row_starts[row] + t * REUSE) % len(tokens)
            a = start + REUSE
            can_cut = ((ring > a) & (ring < a + room)).any()
            window = np.take(tokens, start + np.arange(len(text)), mode="wrap")
            assert (window == text).all() == (can_cut and prob == 1.0)
            b_starts = ring_positions(tokens, ids[cut + 1 : -2])
            assert prob == 1.0 or set(starts.tolist()).intersection(b_starts)
            checked += can_cut
    assert checked > 20


def test_a_ends_at_a_sentence_boundary():
    b = batcher(global_batch=8)
    tokens = flat_tokens("train")
    starts = set(np.asarray(load_split(load_manifest(small_corpus()), "train").sentence_starts))
    row_starts = forward_starts(b, tokens)
    at_boundary = 0
    for t in range(5):
        for row, ids in enumerate(b.batch(t)["input_ids"]):
            start = row_starts[row] + t * REUSE
            if (start + first_sep(ids)) % len(tokens) in starts:
                at_boundary += 1
            else:  # only when no boundary leaves room for B: one sentence fills the window
                window = (start + REUSE + np.arange(1, SEQ - REUSE - 3)) % len(tokens)
                assert not starts.intersection(window.tolist())
    assert at_boundary > 30


def test_bi_data_second_half_of_each_shard_reads_the_same_streams_backwards():
    b = batcher(global_batch=8, bi_data=True, num_data_shards=2)
    backward = b.batch(0)["is_backward"]
    np.testing.assert_array_equal(backward, [0, 0, 1, 1, 0, 0, 1, 1])
    stream_len = b.num_tokens // 4
    steps = -(-stream_len // REUSE)
    forward = np.concatenate([b.batch(t)["input_ids"][:, :REUSE] for t in range(steps)], axis=1)
    first_backward = b.batch(0)["input_ids"][:, :REUSE]
    for fwd_row, bwd_row in ((0, 2), (1, 3), (4, 6), (5, 7)):
        # The backward row starts from its stream's end and reads toward its start.
        stream_end = forward[fwd_row, stream_len - REUSE : stream_len]
        np.testing.assert_array_equal(first_backward[bwd_row], stream_end[::-1])


def test_word_start_and_functional_flags_follow_the_pieces():
    b = batcher(bi_data=True)
    sp = load_processor(load_manifest(small_corpus()).tokenizer_path)
    x = b.batch(5)
    for ids, starts in zip(x["input_ids"], x["is_word_start"], strict=True):
        for i, s in zip(ids, starts, strict=True):
            piece = sp.id_to_piece(int(i))
            assert s == (piece[0] in "\u2581<" or piece in set('!"#$%&()*+,-./:;?@[\\]^_`{|}~'))


def test_two_batchers_give_the_same_batches_and_seeds_differ():
    a, b, c = batcher(bi_data=True), batcher(bi_data=True), batcher(bi_data=True, seed=1)
    for t in (0, 7, 1000):
        for key, value in a.batch(t).items():
            np.testing.assert_array_equal(value, b.batch(t)[key])
    assert not np.array_equal(a.batch(0)["input_ids"], c.batch(0)["input_ids"])


def test_two_processes_with_half_the_rows_equal_one_process_with_all():
    kwargs = dict(global_batch=8, bi_data=True, num_data_shards=2)
    whole = batcher(**kwargs)
    halves = [batcher(**kwargs, process_index=i, process_count=2) for i in range(2)]
    for t in (0, 3, 250):
        for key, value in whole.batch(t).items():
            np.testing.assert_array_equal(value, np.concatenate([h.batch(t)[key] for h in halves]))


def test_a_step_computed_cold_equals_the_one_reached_by_iterating():
    warm = batcher()
    for t in range(38):
        reached = warm.batch(t)
    cold = batcher().batch(37)
    for key, value in cold.items():
        np.testing.assert_array_equal(value, reached[key])


# --- Data ranges (config.data_ranges): each row reads one range of the split's shards ---


def ranged(corpus: str, split="train", **overrides) -> StreamBatcher:
    kwargs = dict(seq_len=SEQ, reuse_len=REUSE, global_batch=8, bi_data=False, seed=0)
    return StreamBatcher(corpus, split, **{**kwargs, **overrides})


def test_one_range_places_the_streams_as_the_layout_says():
    """data_ranges=1 is the whole split: the seed's rotation and permutation, drawn in that
    order from (seed, split), put row r's first reuse block at rotation + perm[r] * N/n."""
    b = batcher(global_batch=8, seed=5)
    tokens = flat_tokens("train")
    rng = np.random.default_rng([5, zlib.crc32(b"train")])
    n, stream_len = len(tokens), len(tokens) // 8
    rotation = rng.integers(n)
    want = (rotation + rng.permutation(8) * stream_len) % n
    assert forward_starts(b, tokens) == want.tolist()


def test_a_split_with_fewer_shards_than_ranges_is_read_whole(caplog):
    """The one-shard test corpus (as every corpus prepared before ranges) reads as today."""
    whole, asked = batcher(global_batch=8), batcher(global_batch=8, data_ranges=4)
    assert asked.ranges == 1 and "every process reads all of it" in caplog.text
    for t in (0, 9):
        for key, value in whole.batch(t).items():
            np.testing.assert_array_equal(value, asked.batch(t)[key])


def test_ranges_partition_the_split_along_its_shards():
    manifest = load_manifest(sharded_corpus())
    whole = np.asarray(load_split(manifest, "train").tokens)
    parts = [np.asarray(load_split(manifest, "train", k, 4).tokens) for k in range(4)]
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    assert all(len(part) < len(whole) / 2 for part in parts)


@pytest.mark.parametrize("next_prob", [0.0, 0.5])
def test_rows_read_only_their_range(next_prob):
    """Row r's reuse blocks, A and B (the continuation, or a span from elsewhere) are all
    text of range r // 2 (8 streams in 4 ranges), read as that range's own ring."""
    manifest = load_manifest(sharded_corpus())
    rings = [np.asarray(load_split(manifest, "train", k, 4).tokens) for k in range(4)]
    b = ranged(sharded_corpus(), data_ranges=4, next_sentence_prob=next_prob)
    for t in (0, 1, 2, 300):
        for row, ids in enumerate(b.batch(t)["input_ids"]):
            ring, others = rings[row // 2], [r for k, r in enumerate(rings) if k != row // 2]
            cut = first_sep(ids)
            reuse_and_a, b_text = ids[:cut], ids[cut + 1 : -2]
            assert ring_positions(ring, reuse_and_a) and ring_positions(ring, b_text)
            assert not any(ring_positions(other, reuse_and_a) for other in others)


@pytest.mark.parametrize("bi_data", [False, True])
def test_ranged_batches_do_not_depend_on_the_process_count(bi_data):
    kwargs = dict(bi_data=bi_data, num_data_shards=2, data_ranges=4 if not bi_data else 2)
    whole = ranged(sharded_corpus(), **kwargs)
    for count in (2, 4):
        shares = [
            ranged(sharded_corpus(), **kwargs, process_index=i, process_count=count)
            for i in range(count)
        ]
        for t in (0, 5, 700):
            for key, value in whole.batch(t).items():
                np.testing.assert_array_equal(
                    value, np.concatenate([s.batch(t)[key] for s in shares])
                )


def test_a_process_needs_only_the_shards_of_its_ranges(tmp_path):
    """Process 1 of 4 (range 1 of 4: shards 2 and 3) works on a copy of the corpus that
    holds no other train shard, and gives the same rows."""
    shutil.copytree(sharded_corpus(), tmp_path / "corpus", ignore=shutil.ignore_patterns("cache"))
    shards = sorted((tmp_path / "corpus").glob("xlnet_corpus/*/*-train.array_record-*"))
    for shard in shards[:2] + shards[4:]:
        shard.unlink()
    alone = ranged(str(tmp_path / "corpus"), data_ranges=4, process_index=1, process_count=4)
    whole = ranged(sharded_corpus(), data_ranges=4)
    for key, value in alone.batch(3).items():
        np.testing.assert_array_equal(value, whole.batch(3)[key][2:4])
    cached = sorted(p.name.split("-", 1)[1] for p in (tmp_path / "corpus" / "cache").iterdir())
    assert cached == ["train-1of4-starts.npy", "train-1of4-tokens.npy"]


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (dict(data_ranges=3), "data_ranges (3) must be >= 1 and divide the 8 streams"),
        (
            dict(global_batch=12, data_ranges=4, process_count=3),
            "config.data_ranges=4: the rows of process 0 of 3 read 2 of the 4 ranges, more "
            "than its share of 1; use a data_ranges that divides the 12 streams and is a "
            "multiple or divisor of the process count: 1, 3, 6, 12.",
        ),
    ],
)
def test_ranges_that_do_not_fit_the_layout_are_refused(overrides, words):
    with pytest.raises(DataError, match=re.escape(words)):
        ranged(sharded_corpus(), **overrides)
