"""A task's module over a batch of texts read as segments through the recurrence memory.

Inputs are [B, S, *rows, L] (task.py): the S segments of each text run in order under one
`lax.scan`, each segment's memory the last mem_len positions of the ones before (padding
marked, so never attended), and the head's outputs of the last segment are the result. With
S = 1 it is one call with no memory, as the original's classifier. The memory is a
constant to the gradient (as in pretraining): earlier segments are read, not trained
through, and run with constant weights, so the backward pass covers the last segment only.
"""

import math
from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.finetune.task import INPUT_KEYS


def apply_segments(
    module: nn.Module,
    params,
    inputs: dict[str, jax.Array],
    *,
    deterministic: bool,
    dropout_key: jax.Array | None = None,
    network_inputs: Mapping[str, jax.Array] | None = None,
):
    """The module's outputs on the last segment, with leading axes [B, *rows].

    Args:
      module: a task module (task.Task.module); its config's mem_len is the memory length.
      params: its parameters.
      inputs: INPUT_KEYS, each [B, S, *rows, L].
      deterministic: disables dropout; otherwise dropout_key seeds it (one key per segment).
      network_inputs: the task's network_inputs, each [B, ...]: passed to every segment's
        call as keyword arguments, repeated over the rows to [B * prod(rows), ...].
    """
    ids = inputs["input_ids"]
    batch, segments, *rows, length = ids.shape
    num_rows = batch * math.prod(rows)

    def by_segment(x: jax.Array) -> jax.Array:  # [B, S, *rows, L] -> [S, B * rows, L]
        return jnp.moveaxis(x, 1, 0).reshape(segments, num_rows, length)

    extras = {k: jnp.repeat(v, math.prod(rows), axis=0) for k, v in (network_inputs or {}).items()}
    cfg = module.config
    mem_len = cfg.mem_len if segments > 1 else 0
    carry = (
        jnp.zeros((cfg.n_layer, num_rows, mem_len, cfg.d_model), jnp.float32),
        jnp.ones((num_rows, mem_len), bool),
    )

    def segment(weights, carry, xs):
        ids, seg_ids, input_mask, index = xs
        rngs = {} if deterministic else {"dropout": jax.random.fold_in(dropout_key, index)}
        outputs, mems, mem_mask = module.apply(
            {"params": weights}, ids, seg_ids, input_mask, *carry,
            deterministic=deterministic, rngs=rngs, **extras,
        )  # fmt: skip
        return (mems, mem_mask), outputs

    xs = (*(by_segment(inputs[k]) for k in INPUT_KEYS), jnp.arange(segments))
    if segments > 1:
        # The earlier segments only make the memory, a constant to the gradient: run them
        # with constant weights, so that the backward pass covers the last segment alone.
        frozen = jax.lax.stop_gradient(params)
        earlier = jax.tree.map(lambda x: x[:-1], xs)
        carry, _ = jax.lax.scan(lambda c, x: segment(frozen, c, x), carry, earlier)
    _, outputs = segment(params, carry, jax.tree.map(lambda x: x[-1], xs))
    return jax.tree.map(lambda x: x.reshape(batch, *rows, *x.shape[1:]), outputs)
