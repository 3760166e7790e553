"""A task's module over a batch of texts read as segments through the recurrence memory.

Inputs are [B, S, *rows, L] (task.py): the S segments of each text run in order under one
`lax.scan`, each segment's memory the last mem_len positions of the ones before (padding
marked, so never attended), and the head's outputs of the last segment are the result. With
S = 1 it is one call with no memory, as the original's classifier.

The segments of one text are one graph, so the gradient can take either of two paths:
- mem_gradient False: the memory is a constant to the gradient (as in pretraining); the
  earlier segments are read with constant weights, and the backward pass covers the last
  segment only.
- mem_gradient True: the gradient flows from the head back through the memory into every
  earlier segment, which so learn what to leave in the memory for the task; the backward
  pass covers all S segments (their activations are kept, or recomputed with config.remat).
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
    mem_gradient: bool = False,
):
    """The module's outputs on the last segment, with leading axes [B, *rows].

    Args:
      module: a task module (task.Task.module); its config's mem_len is the memory length.
      params: its parameters.
      inputs: INPUT_KEYS, each [B, S, *rows, L].
      deterministic: disables dropout; otherwise dropout_key seeds it (one key per segment).
      network_inputs: the task's network_inputs, each [B, ...]: passed to every segment's
        call as keyword arguments, repeated over the rows to [B * prod(rows), ...].
      mem_gradient: the gradient flows through the memory into the earlier segments (see
        the module's docstring); False reads them with constant weights and memory.
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
        # Without mem_gradient the earlier segments only make the memory, a constant to the
        # gradient: run them with constant weights, so the backward pass covers the last
        # segment alone.
        weights = params if mem_gradient else jax.lax.stop_gradient(params)
        earlier = jax.tree.map(lambda x: x[:-1], xs)
        carry, _ = jax.lax.scan(lambda c, x: segment(weights, c, x), carry, earlier)
        if not mem_gradient:
            carry = jax.lax.stop_gradient(carry)
    _, outputs = segment(params, carry, jax.tree.map(lambda x: x[-1], xs))
    return jax.tree.map(lambda x: x.reshape(batch, *rows, *x.shape[1:]), outputs)
