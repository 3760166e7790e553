"""RACE passages longer than one row, read as segments through the recurrence memory.

A RACE row is the passage, <sep>, the question with the option, <sep>, <cls>, padded on the
left. Read as S segments of L, every segment is such a row of its own: a window of the
passage beside the question and option, the windows consecutive, so each is read knowing
the option; the first window is the one-segment (truncated) row, and a passage that needs
fewer windows has padding segments first. A 1-layer model's segments, its memory every
earlier position, then give the logits of one long pass over the S rows joined (its one
layer attends every earlier position's input, which is what the memory holds; memory keys
count as token type A, so the long pass gives the earlier rows that type), with the four
options on their own axis. (The gradient through the memory, on the same path, is
tests/test_finetune_mem_gradient.py's.)
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from xlnet_jax.config import ModelConfig
from xlnet_jax.data.tokenizer import CLS_ID, SEP_ID
from xlnet_jax.finetune import features
from xlnet_jax.finetune.forward import apply_segments
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.tasks.race import RaceExample

WORDS = "the cat dog sat on a mat and ran far away from home today which one _".split()
VOCAB, SEGMENTS, LENGTH = 40, 3, 12


class WordEncoder:
    """One id per word (from 10, past XLNet's special ids): what featurize asks of an encoder."""

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        return [[10 + WORDS.index(word) for word in text.split()] for text in texts]


def _examples() -> list[RaceExample]:
    """A passage past two segments and a short one (padding), each with 4 options."""
    rng = np.random.default_rng(0)
    long_passage = " ".join(rng.choice(WORDS[:-3], SEGMENTS * LENGTH))  # cut to fit
    options = ("cat", "dog", "mat", "home")
    return [
        RaceExample("middle/1.txt:0", long_passage, "which one _", options, 2, "middle"),
        RaceExample("high/2.txt:0", "the cat sat", "which one ran far", options, 0, "high"),
    ]


def _features(seq_len: int, num_segments: int) -> dict[str, np.ndarray]:
    config = ml_collections.ConfigDict(
        {"seq_len": seq_len, "num_segments": num_segments, "max_qa_length": 6}
    )
    return get_task("race").featurize(_examples(), WordEncoder(), config, []).arrays


@pytest.fixture(scope="module")
def segmented() -> dict[str, np.ndarray]:
    """The examples' features as SEGMENTS segments: [N, S, 4, L]."""
    return _features(LENGTH, SEGMENTS)


def test_every_segment_is_a_row_with_the_option_and_the_windows_cover_the_passage(segmented):
    ids, seg, mask = (segmented[k] for k in ("input_ids", "seg_ids", "input_mask"))
    passage = WordEncoder().encode_many([_examples()[0].article])[0]
    question = WordEncoder().encode_many(["which one"])[0]
    for option, option_ids in zip(("cat", "dog", "mat", "home"), range(4), strict=True):
        qa = [*question, *WordEncoder().encode_many([option])[0]]
        window = LENGTH - 3 - len(qa)
        rows = ids[0, :, option_ids]  # the long passage: every segment a full row
        for row in rows:
            np.testing.assert_array_equal(row[window:], [SEP_ID, *qa, SEP_ID, CLS_ID])
        np.testing.assert_array_equal(rows[:, :window].ravel(), passage[: SEGMENTS * window])
        assert (seg[0, :, option_ids, -1] == features.SEG_CLS).all()
    assert not mask[0].any()
    # The short passage: padding segments, then one row: its passage, question and option.
    assert mask[1, :-1].all() and (seg[1, :-1] == features.SEG_PAD).all()
    assert ids[1, -1, 0, -1] == CLS_ID and not mask[1, -1, :, -8:].any()
    # The first window is the row of the passage truncated to one segment.
    one_segment = _features(LENGTH, 1)
    for key in ("input_ids", "seg_ids", "input_mask"):
        np.testing.assert_array_equal(segmented[key][0, 0], one_segment[key][0, 0])


def test_the_segments_give_the_long_pass_of_every_option(segmented):
    """Logits [N, 4, 1] of the segments with memory equal one pass over S * L tokens
    (float32 rounding: logits O(1), rounding ~1e-7 per operation)."""
    model = ModelConfig(
        vocab_size=VOCAB, d_model=32, n_layer=1, n_head=2, d_head=16, d_inner=64,
        dropout=0.0, dropatt=0.0,
    )  # fmt: skip
    task = get_task("race")
    with_memory = task.module(dataclasses.replace(model, mem_len=LENGTH * (SEGMENTS - 1)), [])
    one_pass = task.module(model, [])
    rows = jnp.zeros((2, LENGTH), jnp.int32)
    empty = jnp.zeros((1, 2, 0, 32)), jnp.zeros((2, 0), bool)
    init = jax.jit(functools.partial(one_pass.init, deterministic=True))  # one compile
    params = init(jax.random.key(0), rows, rows, rows < 0, *empty)["params"]
    rng = np.random.default_rng(1)  # noise at a scale where every layer moves the logits
    params = jax.tree.map(lambda x: x + rng.normal(0, 0.1, x.shape).astype(np.float32), params)
    inputs = {k: jnp.asarray(v) for k, v in segmented.items() if k != "label"}
    # The earlier rows as the memory's keys are typed: A (padding stays hidden by the mask).
    joined = {**inputs, "seg_ids": inputs["seg_ids"].at[:, :-1].set(features.SEG_A)}
    long_inputs = {
        k: jnp.moveaxis(v, 1, 2).reshape(2, 1, 4, SEGMENTS * LENGTH) for k, v in joined.items()
    }

    @jax.jit
    def both(p):
        run = functools.partial(apply_segments, params=p, deterministic=True)
        return run(with_memory, inputs=inputs), run(one_pass, inputs=long_inputs)

    logits, long_logits = both(params)
    assert logits.shape == (2, 4, 1)
    np.testing.assert_allclose(logits, long_logits, rtol=1e-5, atol=1e-6)
    # The options' logits differ: the parity is not one of constants.
    assert float(jnp.ptp(logits[0])) > 1e-3
