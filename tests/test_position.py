"""position.scores_by_key: the relative shift of positional scores, by its definition."""

import jax
import jax.numpy as jnp
import numpy as np

from xlnet_jax.model.position import scores_by_key


def test_scores_by_key_keeps_distance_index_L_minus_t_plus_j():
    rng = np.random.default_rng(0)
    batch, heads, length, mem = 2, 3, 7, 4
    keys = mem + length
    scores = rng.normal(size=(batch, heads, 5, keys + length)).astype(np.float32)
    positions = np.array([[0, 6, 3, 3, 1], [6, 0, 2, 5, 4]], np.int32)  # first, last, repeats

    got = np.asarray(scores_by_key(jnp.asarray(scores), jnp.asarray(positions), keys))

    b, n, q, j = np.meshgrid(*map(np.arange, (batch, heads, 5, keys)), indexing="ij")
    want = scores[b, n, q, length - positions[b, q] + j]
    np.testing.assert_array_equal(got, want)  # a pure data movement: exact


def test_scores_by_key_gradient_lands_on_the_window():
    """Each row's cotangent goes back to exactly its window of the encodings, nothing else."""
    positions = jnp.array([[2, 0]], jnp.int32)
    scores = jnp.zeros((1, 1, 2, 5 + 3))  # K = 5 keys, L = 3
    weights = jnp.arange(1.0, 11.0).reshape(1, 1, 2, 5)
    grad = jax.grad(lambda s: jnp.sum(scores_by_key(s, positions, 5) * weights))(scores)
    want = np.zeros((2, 8), np.float32)
    want[0, 1:6] = np.arange(1, 6)  # position 2: window from L - 2 = 1
    want[1, 3:8] = np.arange(6, 11)  # position 0: window from L = 3
    np.testing.assert_array_equal(np.asarray(grad)[0, 0], want)
