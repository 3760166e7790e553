"""Attention dropout as a pure function of (key words, query, key): nothing is stored.

Each [B, N] pair of (row, head) gets a 32-bit word from the layer's dropout rng (itself a
function of seed, step, layer and stream: flax splits it per scanned layer, and each stream
draws its own). An entry (q, k) is kept when two rounds of murmur3's 32-bit finaliser over
word ^ (q << 16 | k) land at or above `rate` of the 32-bit range (compared on the top 24
bits). The finaliser is a bijection with full avalanche, so for one word the Q x K entries
get distinct, well-mixed values; the second round, keyed again, removes the structure that
neighbouring counters would keep through one round. Good enough for dropout (not for
cryptography): the statistics tests check the keep rate and the correlation of neighbouring
entries, rows and steps. The XLA path and both kernels call `keep`, so they drop the same
entries, and the backward recomputes the mask from the same words.
"""

import jax
import jax.numpy as jnp

# Query and key indices share one 32-bit counter: q in the high half, k in the low half.
MAX_INDEX = 1 << 16
_THRESHOLD_BITS = 24


def row_head_words(key: jax.Array, batch: int, heads: int) -> jax.Array:
    """uint32 [B, N]: one word per (row, head) from a dropout rng key."""
    return jax.random.bits(key, (batch, heads), jnp.uint32)


def _fmix32(x: jax.Array) -> jax.Array:
    """murmur3's finaliser: a bijection of uint32 with full avalanche."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def threshold(rate: float) -> int:
    """The 24-bit level at or above which an entry is kept."""
    return round(rate * (1 << _THRESHOLD_BITS))


def keep(words: jax.Array, q: jax.Array, k: jax.Array, rate: float) -> jax.Array:
    """bool: whether entry (q, k) survives dropout, broadcasting words, q and k (uint32 or int32).

    Args:
      words: uint32 words of (row, head), broadcastable against q and k.
      q: query indices (row of the stream, < MAX_INDEX).
      k: key indices (memory then segment, < MAX_INDEX).
      rate: the drop probability, in [0, 1).
    """
    words = words.astype(jnp.uint32)
    counter = (q.astype(jnp.uint32) << 16) | k.astype(jnp.uint32)
    mixed = _fmix32(_fmix32(words ^ counter) + words)
    return (mixed >> (32 - _THRESHOLD_BITS)).astype(jnp.int32) >= threshold(rate)


def dense_keep(words: jax.Array, num_queries: int, num_keys: int, rate: float) -> jax.Array:
    """bool [B, N, Q, K]: the whole mask, for the XLA path (words uint32 [B, N])."""
    q = jax.lax.broadcasted_iota(jnp.uint32, (1, 1, num_queries, num_keys), 2)
    k = jax.lax.broadcasted_iota(jnp.uint32, (1, 1, num_queries, num_keys), 3)
    return keep(words[:, :, None, None], q, k, rate)
