"""Statistics of the attention dropout mask (model/kernels/dropout.py), which the XLA path
and the kernel share: the keep rate, and no correlation between neighbouring entries (along
the queries and the keys), rows, heads, or masks of different rng keys (steps, layers, streams).

Every bound is 4 sigma of the statistic under independent Bernoulli entries.
"""

import jax
import numpy as np
import pytest

from xlnet_jax.model.kernels import dropout
from xlnet_jax.training import steps

BATCH, HEADS, QUERIES, KEYS = 4, 4, 64, 64


def mask(key: jax.Array, rate: float = 0.1) -> np.ndarray:
    """float64 [B, N, Q, K]: 1 where the entry is kept."""
    words = dropout.row_head_words(key, BATCH, HEADS)
    return np.asarray(dropout.dense_keep(words, QUERIES, KEYS, rate), np.float64)


def step_key(step: int) -> jax.Array:
    """The dropout key of a train step, as steps.train_step derives it."""
    rng_data = jax.random.key_data(jax.random.key(0))
    return steps.step_keys(rng_data, step)[1]


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_keep_rate_is_one_minus_dropatt(rate):
    kept = mask(step_key(0), rate)
    keep = 1 - rate
    sigma = np.sqrt(keep * (1 - keep) / kept.size)
    assert abs(kept.mean() - keep) < 4 * sigma, kept.mean()


def neighbours(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Two masks whose entries pair up as `name` says."""
    m = mask(step_key(0))
    if name == "queries":
        return m[:, :, :-1], m[:, :, 1:]
    if name == "keys":
        return m[..., :-1], m[..., 1:]
    if name == "rows":
        return m[:-1], m[1:]
    if name == "heads":
        return m[:, :-1], m[:, 1:]
    if name == "steps":
        return m, mask(step_key(1))
    # Layers and streams: flax gives each its own key split from the step's.
    first, second = jax.random.split(step_key(0))
    return mask(first), mask(second)


@pytest.mark.parametrize("name", ["queries", "keys", "rows", "heads", "steps", "layers"])
def test_no_correlation_between_neighbours(name):
    a, b = (x.ravel() for x in neighbours(name))
    correlation = np.corrcoef(a, b)[0, 1]
    assert abs(correlation) < 4 / np.sqrt(a.size), correlation


def test_the_mask_is_the_same_tile_by_tile():
    """keep() of one tile's indices is the dense mask's tile: what the kernel computes."""
    words = dropout.row_head_words(step_key(3), BATCH, HEADS)
    dense = dropout.dense_keep(words, QUERIES, KEYS, 0.1)
    q = 16 + np.arange(8)[:, None]
    k = 40 + np.arange(8)[None, :]
    tile = dropout.keep(words[:, :, None, None], q.astype(np.int32), k.astype(np.int32), 0.1)
    np.testing.assert_array_equal(tile, dense[:, :, 16:24, 40:48])
