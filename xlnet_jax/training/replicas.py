"""The original's per-core clip, for pretraining's and fine-tuning's train steps alike.

zihangdai/xlnet on TPU (its train, run_classifier, run_squad and run_race scripts) wraps its
optimiser in TF1's CrossShardOptimizer, reduction MEAN: each core's gradient of its own
rows' mean loss is divided by the core count, model_utils.get_train_op clips it by global
norm on that core, and the cores' clipped gradients are summed. The result depends on the
core count, not only on the batch. Here the count is a config field apart from the mesh
(fine-tuning's clip_replicas, pretraining's pretrain_clip_replicas), so one CPU or GPU
makes the update of that many cores: the batch's rows split into that many equal
consecutive shares, each share's gradient taken alone (a vmap over the shares), divided,
clipped and summed. share_problem is the check both configs run on the count.
"""

import functools
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax.sharding import NamedSharding

from xlnet_jax.training import accumulate


def share_problem(
    config: ml_collections.ConfigDict, field: str, replicas: int, zero: str
) -> str | None:
    """The one-line problem of a per-core clip count `replicas` (config.`field`) that does
    not divide each micro-batch's rows, else None; `zero` says what 0 means there."""
    batch, micro_batches = config.batch_size, config.grad_accum_steps
    rows = batch // max(micro_batches, 1)
    if replicas <= 0 or rows % replicas == 0:
        return None
    return (
        f"config.{field}: {replicas} does not divide a micro-batch's {rows} rows "
        f"(batch_size {batch} / grad_accum_steps {micro_batches}); "
        f"set a count that divides it, or 0 for {zero}"
    )


def replica_gradients(
    loss_fn: Callable,
    params,
    rows,
    row_weights: jax.Array,
    key_of: Callable[[jax.Array], jax.Array],
    replicas: int,
    clip_norm: float,
    sharding: NamedSharding | None = None,
    micro_batches: int = 1,
):
    """(loss, unclipped gradient, clipped gradient, aux) as the original's TPU step over
    `replicas` cores makes them.

    `rows` is a tree of [B, ...] arrays, the step's rows; row_weights [B] each row's weight
    in its share's mean (fine-tuning: the feature's weight; pretraining: its target count).
    The rows split into `replicas` equal consecutive shares (the data-parallel devices'
    shares when the count is theirs). Each share's gradient of the whole step is summed over
    `micro_batches` micro-batches first (training/accumulate.py: a share of a micro-batch
    lies within its share of the batch), then divided by `replicas` and clipped at
    clip_norm (0: not clipped). key_of(micro-batch index) is that micro-batch's key; share r
    draws fold_in(it, r) (one share: the key itself).

    loss_fn(params, share_rows, key, share_weight) -> (loss, aux): the share's rows' loss
    sum over share_weight, the share's weight in the whole step (its mean). The returned
    loss is the rows' weighted mean over the step; aux is each share's, stacked
    [micro_batches, replicas, ...] (accumulate.split's micro-batch order).

    `sharding` (the batch's rows over the data devices) places share r, and its gradient,
    on replica r's device when the shares spread evenly over the data devices; otherwise
    the shares are left to XLA and each share's rows follow the model's batch axis where
    they divide over the devices.
    """
    devices = 1 if sharding is None else sharding.mesh.shape["data"] * sharding.mesh.shape["fsdp"]
    share_rows = row_weights.shape[0] // (replicas * micro_batches)
    if replicas % devices:
        sharding = None

    def place(tree):
        if sharding is None:
            return tree
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

    def shares(tree):
        return place(jax.tree.map(lambda x: x.reshape(replicas, -1, *x.shape[1:]), tree))

    weights = jnp.sum(shares(row_weights), axis=1)  # each share's weight in the step
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    # Within a share the rows stay on its device: the model's "batch" constraints would
    # spread the share's rows over every data device (each then computing every share).
    rules = [
        (name, None if name == "batch" else axes) for name, axes in nn.get_logical_axis_rules()
    ]
    if sharding is None and devices > 1 and share_rows % devices == 0:
        rules = list(nn.get_logical_axis_rules())  # each share's rows over every device

    def micro(index, micro_rows):
        k = key_of(index)
        if replicas == 1:
            keys = k[None]
        else:
            keys = jax.vmap(lambda r: jax.random.fold_in(k, r))(jnp.arange(replicas))
        # The shares' axis lies on the data devices (spmd_axis_name, when they are all of
        # the replicas): so the attention kernel's shard_map runs each device on its own
        # share, not on every share.
        spmd_axes = None
        if sharding is not None and sharding.mesh.shape["fsdp"] == 1:
            spmd_axes = "data"
        with nn.logical_axis_rules(rules):
            (losses, aux), grads = jax.vmap(
                grad_fn, in_axes=(None, 0, 0, 0), spmd_axis_name=spmd_axes
            )(params, shares(micro_rows), keys, weights)
        return (losses, place(grads)), aux

    zeros = jax.tree.map(lambda p: jnp.zeros((replicas, *p.shape), p.dtype), params)
    init = (jnp.zeros((replicas,)), place(zeros))
    (losses, grads), aux = accumulate.sum_over(micro, init, accumulate.split(rows, micro_batches))
    grads = place(jax.tree.map(lambda g: g / replicas, grads))
    clip = optax.clip_by_global_norm(clip_norm) if clip_norm > 0 else optax.identity()
    clipped = jax.vmap(lambda g: clip.update(g, clip.init(g))[0])(grads)
    loss = jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)
    total = functools.partial(jax.tree.map, lambda g: jnp.sum(g, axis=0))
    return loss, total(grads), total(clipped), aux
