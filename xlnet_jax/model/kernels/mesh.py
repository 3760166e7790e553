"""The kernel per shard of the active mesh: attention is independent per row and head.

A Pallas call is opaque to XLA's partitioner, which would gather its inputs whole onto every
device. Under a mesh (sharding.activate) the call runs inside `jax.shard_map` instead, each
device on its own rows (the logical "batch" axes) and heads ("heads"), as the surrounding
activations are laid out.

It also says which chip the step is traced for (the abstract mesh's device, so an AOT compile
for a TPU topology from a CPU host sees the topology's chip): the kernel's shift and
attention_impl="auto" follow it, and so does the kernel backend (kernels.backends).
"""

import functools

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec as P

from xlnet_jax.model.kernels.backends import relative_attention

# TPU generations whose Mosaic has no strided lane rotation (tiles.TileSpec.strided_roll).
NO_STRIDED_ROLL = ("TPU v2", "TPU v3", "TPU v4")
# TPU generations whose Mosaic has no bfloat16 matmul (v3: "E2001: Unsupported matmul RHS
# type on target: vector<128x128xbf16>"; v2 assumed alike): attention_impl="auto" keeps XLA
# there in bfloat16.
NO_BF16_MATMUL = ("TPU v2", "TPU v3")


def target_device():
    """The chip being traced for (its .platform, .device_kind): the active mesh's abstract
    device, else the default device."""
    return jax.sharding.get_abstract_mesh().abstract_device or jax.devices()[0]


def sharded_relative_attention(
    q, k, v, k_r, biases, seg_embed, row, key, positions, words, *, dropatt: float
):
    """relative_attention (same arguments), mapped over the active mesh's batch and head axes
    (the dropout words [B, N] too, so each shard drops what the whole would)."""
    mesh = jax.sharding.get_abstract_mesh()
    device = target_device()
    strided_roll = not device.device_kind.startswith(NO_STRIDED_ROLL)
    attend = functools.partial(
        relative_attention, dropatt=dropatt, strided_roll=strided_roll, platform=device.platform
    )
    if mesh.empty or mesh.size == 1:
        return attend(q, k, v, k_r, biases, seg_embed, row, key, positions, words)
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
        P(batch, None),  # positions (None, an empty tree, for the content stream)
        P(batch, heads),  # words (None without dropatt)
    )
    # check_vma=False: pallas_call's outputs carry no varying-axes annotation.
    sharded = jax.shard_map(attend, mesh=mesh, in_specs=specs, out_specs=per_head, check_vma=False)
    return sharded(q, k, v, k_r, biases, seg_embed, row, key, positions, words)
