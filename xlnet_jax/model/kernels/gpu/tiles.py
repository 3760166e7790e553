"""One [block_q, block_k] score tile on the Triton backend, shared by its forward and backward.

The positional scores BD = (q + r_r) . k_r^T come from one batched matmul outside the kernel
(attention.positional_layout), laid out flat per (row, head) so that a tile's skewed scores
are contiguous and 16-byte aligned: row r of the tile reads `bd[r * pitch + offset[r] + j]`
for its keys j, with `pitch` and every `offset[r]` multiples of ALIGN (the kernel gets
offset / ALIGN and multiplies it back, so Triton's alignment analysis sees the factor and
emits vector loads and stores). Masks come from `masks.blocked`, as on the TPU; dropout from
`dropout.keep`.
"""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from xlnet_jax.model.kernels import dropout, masks, matmul

# Alignment, in entries, of every row's window in the flat positional scores: 8 bfloat16
# entries are one 16-byte vector load.
ALIGN = 8


class Launch(NamedTuple):
    """Triton's launch parameters of one kernel."""

    warps: int
    stages: int


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Rows = keys per tile (a power of two, as Triton needs) and each kernel's launch."""

    block: int
    forward: Launch
    rows: Launch  # the rows backward (d(q + r_w), segment gradients, dBD)
    keys: Launch  # the keys backward (dk, dv)


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """Static facts of one Triton kernel call.

    Attributes:
      tiles: the tile size and each kernel's launch parameters (attention.gpu_tiles).
      scale: 1 / sqrt(d_head).
      num_keys: K, real keys (the rest of the last key block is padding, never attended).
      rate: attention dropout probability (0: none).
      pitch: entries between the starts of two rows in the flat positional scores.
    """

    tiles: Tiles
    scale: float
    num_keys: int
    rate: float
    pitch: int

    @property
    def block_q(self) -> int:
        return self.tiles.block

    @property
    def block_k(self) -> int:
        return self.tiles.block


def row_fields(row_ref, first, size: int) -> list[jax.Array]:
    """The ROW_FIELDS int32 [size] columns of a [rows, ROW_FIELDS] info ref, from row first."""
    return [row_ref[pl.ds(first, size), f] for f in range(masks.ROW_FIELDS)]


def key_fields(key_ref, first, size: int) -> list[jax.Array]:
    """The KEY_FIELDS int32 [size] rows of a [KEY_FIELDS, keys] info ref, from key first."""
    return [key_ref[f, pl.ds(first, size)] for f in range(masks.KEY_FIELDS)]


def _skewed_index(spec: GpuSpec, first_row, offsets: jax.Array, jb) -> jax.Array:
    """int32 [bq, bk]: where row r (from first_row) meets key j in the flat positional scores."""
    rows = first_row + jnp.arange(spec.block_q)
    starts = rows * spec.pitch + offsets * ALIGN + jb * spec.block_k
    return starts[:, None] + jnp.arange(spec.block_k)[None, :]


def positional(spec: GpuSpec, bd_ref, first_row, offsets: jax.Array, jb) -> jax.Array:
    """float32 [bq, bk]: the tile's positional scores (module doc; offsets int32 [bq] in units
    of ALIGN). In bounds by construction (attention.positional_layout), so unmasked."""
    return bd_ref[_skewed_index(spec, first_row, offsets, jb)].astype(jnp.float32)


def skewed_store(spec: GpuSpec, dbd_ref, first_row, offsets: jax.Array, jb, tile: jax.Array):
    """The transpose of `positional`: tile [bq, bk] written where `positional` read it (each
    (row, key) owns a distinct entry by construction)."""
    dbd_ref[_skewed_index(spec, first_row, offsets, jb)] = tile.astype(dbd_ref.dtype)


def scores(spec: GpuSpec, jb, qw, k, pos, seg_same, seg_other, rows, keys):
    """Scaled, masked scores of one tile.

    Args:
      spec: the static GpuSpec.
      jb: key block index.
      qw: [bq, H] q + r_w of the rows; k: [bk, H] keys.
      pos: float32 [bq, bk] positional scores (from `positional`).
      seg_same, seg_other: float32 [bq] segment scores of the rows.
      rows: the ROW_FIELDS int32 [bq] columns of the row info; keys: the KEY_FIELDS [bk] rows
        of the key info.

    Returns:
      (scores float32 [bq, bk], dead bool: blocked or padding, other bool: another segment),
      as `tiles.scores` on the TPU.
    """
    row = [x[:, None] for x in rows]
    key = [x[None, :] for x in keys]
    other = row[masks.ROW_SEGMENT] != key[masks.KEY_SEGMENT]
    seg = jnp.where(other, seg_other[:, None], seg_same[:, None])
    s = (matmul.dot_t(qw, k) + pos + seg) * spec.scale
    blocked = masks.blocked(
        *(row[f] for f in (masks.SELF_RANK, masks.ROW_BLOCK, masks.ROW_POSITION)),
        *(key[f] for f in (masks.KEY_RANK, masks.KEY_BLOCK, masks.KEY_POSITION)),
    )
    padding = (jb * spec.block_k + jnp.arange(spec.block_k))[None, :] >= spec.num_keys
    s = jnp.where(blocked, masks.BLOCKED, s)
    return jnp.where(padding, -jnp.inf, s), blocked | padding, other


def kept(spec: GpuSpec, words, first_row, jb) -> jax.Array:
    """bool [bq, bk]: the tile's dropout mask (row index among the stream's rows, key index)."""
    q = first_row + jnp.arange(spec.block_q)
    k = jb * spec.block_k + jnp.arange(spec.block_k)
    return dropout.keep(words, q[:, None], k[None, :], spec.rate)
