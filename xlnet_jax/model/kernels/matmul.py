"""The two tile products of the kernels, in float32 whatever the operands (both backends)."""

import jax
import jax.numpy as jnp


def dot_t(a: jax.Array, b: jax.Array) -> jax.Array:
    """a @ b.T in float32 ([m, h] x [n, h] -> [m, n])."""
    return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def t_dot(a: jax.Array, b: jax.Array) -> jax.Array:
    """a.T @ b in float32 ([m, n] x [m, h] -> [n, h])."""
    return jax.lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
