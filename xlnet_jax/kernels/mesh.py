"""The kernel per shard of the active mesh: attention is independent per row and head.

A Pallas call is opaque to XLA's partitioner, which would gather its inputs whole onto every
device. Under a mesh (sharding.activate) the call runs inside `jax.shard_map` instead, each
device on its own rows (the logical "batch" axes) and heads ("heads"), as the surrounding
activations are laid out.
"""

import functools

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec as P

from xlnet_jax.kernels.relative_attention import relative_attention


def sharded_relative_attention(q, k, v, k_r, biases, seg_embed, row, key, positions):
    """relative_attention (same arguments), mapped over the active mesh's batch and head axes."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return relative_attention(q, k, v, k_r, biases, seg_embed, row, key, positions)
    batch, heads = nn.logical_to_mesh_axes(("batch", "heads"))
    per_head = P(batch, None, heads, None)
    specs = (
        per_head,
        per_head,
        per_head,
        P(batch if k_r.shape[0] > 1 else None, None, heads, None),
        (P(heads, None),) * 3,
        P(None, heads, None),
        P(batch, None, None),
        P(batch, None, None),
    )
    args = (q, k, v, k_r, biases, seg_embed, row, key)
    if positions is not None:
        specs, args = (*specs, P(batch, None)), (*args, positions)
    fn = (
        relative_attention
        if positions is not None
        else functools.partial(relative_attention, positions=None)
    )
    # check_vma=False: pallas_call's outputs carry no varying-axes annotation.
    return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=per_head, check_vma=False)(*args)
