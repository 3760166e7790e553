"""Gradient accumulation: one optimiser step's batch as grad_accum_steps micro-batches whose
sums (gradients, loss terms) add up in a `lax.scan`; pretraining's and fine-tuning's train
steps share it.

Micro-batch i holds rows i, n + i, 2n + i, ... of the batch. The batch's rows are laid out
over the data shards in contiguous blocks, so each data shard's part of a micro-batch comes
from its own rows (nothing moves between devices), and a contiguous share of a micro-batch
(a replica's, in fine-tuning's per-replica clipping) lies within the same share of the whole
batch. That needs the micro-batch to divide over the data shards (run/validate.py).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp


def split(tree, n: int):
    """[B, ...] -> [n, B/n, ...] for every array of `tree`: micro-batch i is rows i::n."""

    def one(x):
        x = x.reshape(x.shape[0] // n, n, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    return jax.tree.map(one, tree)


def merge(x: jax.Array) -> jax.Array:
    """Inverse of `split` for one array: [n, B/n, ...] -> [B, ...]."""
    x = jnp.swapaxes(x, 0, 1)
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def sum_over(fn: Callable, init, micro_batches):
    """(init plus the sum of every micro-batch's sums, the per-micro-batch outputs stacked).

    fn(index, micro_batch) -> (sums, output): `sums` a tree shaped as `init`, `output` any
    tree (None for none); `micro_batches` a tree of [n, ...] arrays (see `split`), run in
    order 0..n-1 under one lax.scan, so only one micro-batch's activations are live at once.
    """
    n = jax.tree.leaves(micro_batches)[0].shape[0]

    def body(total, inputs):
        index, micro_batch = inputs
        sums, output = fn(index, micro_batch)
        return jax.tree.map(jnp.add, total, sums), output

    return jax.lax.scan(body, init, (jnp.arange(n), micro_batches))
