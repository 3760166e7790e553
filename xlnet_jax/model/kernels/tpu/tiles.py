"""One [block, block] score tile of XLNet relative attention, shared by forward and backward.

A tile covers query rows [ib * b, (ib + 1) * b) and keys [jb * b, (jb + 1) * b) of
[memory ; segment]. Its three terms come from O(b·H) inputs:
  content     (q + r_w) . k;
  positional  (q + r_r) . k_r[L - t + j]. For the content stream (t = i) the distances of a
              tile form one window of 2b rows of the padded k_r; the tile is computed against
              the window and shifted row by row (`shift_window`): one strided roll where
              the chip has it (TPU v5 and later), else uniform rolls and selects. The
              query stream (targets at arbitrary t) passes a precomputed bias tile instead;
  segment     (q + r_s) . seg_embed[same / other], precomputed as 2 columns per row.
The mask comes from the row and key info vectors of `masks`; the attention dropout of the
tile from its (row, head) word and the entries' indices (`dropout.keep`).
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlnet_jax.model.kernels import dropout, masks, matmul


@dataclasses.dataclass(frozen=True)
class TileSpec:
    """Static shape facts of one kernel call.

    Attributes:
      block: b, rows and keys per tile.
      scale: 1 / sqrt(d_head).
      num_keys: K, real keys (the rest of the last key block is padding, never attended).
      window_offset: content stream: index in the padded k_r of the window of tile (0, 0);
        tile (ib, jb) starts (jb - ib) * b further. None: the query stream (bias tiles).
      strided_roll: shift with one strided lane rotation (Mosaic has it on TPU v5 and later;
        on v2-v4 it fails with `SupportsVectorRotateLaneStride`), else with a barrel shifter.
      dropatt: the attention dropout rate; 0: none (the kernels then take no words).
    """

    block: int
    scale: float
    num_keys: int
    window_offset: int | None
    strided_roll: bool
    dropatt: float = 0.0

    @property
    def windowed(self) -> bool:
        return self.window_offset is not None


def dropout_scale(spec: TileSpec, words: jax.Array, ib, jb) -> jax.Array:
    """float32 [b, b]: 1 / (1 - dropatt) where tile (ib, jb) keeps an entry, else 0.

    words: uint32 [1, 1], the (row, head) word; entry (a, c) is query row ib * b + a of the
    stream and key jb * b + c of [memory ; segment], as the XLA path numbers them.
    """
    b = spec.block
    q = ib * b + jax.lax.broadcasted_iota(jnp.int32, (b, b), 0)
    k = jb * b + jax.lax.broadcasted_iota(jnp.int32, (b, b), 1)
    kept = dropout.keep(words, q, k, spec.dropatt)
    return jnp.where(kept, jnp.float32(1 / (1 - spec.dropatt)), jnp.float32(0))


def window(kr_ref, spec: TileSpec, ib, jb) -> tuple[jax.Array, jax.Array]:
    """(start, k_r rows [2b, H]) of the positional window of tile (ib, jb); start is b-aligned."""
    b = spec.block
    start = pl.multiple_of(spec.window_offset + (jb - ib) * b, b)
    return start, kr_ref[pl.ds(start, 2 * b), :]


def roll_rows_by_index(x: jax.Array, direction: int) -> jax.Array:
    """Row a of x rotated along the lanes by a (direction 1: right, -1: left).

    A barrel shifter: for each bit of a, one uniform roll of the whole tile and a select.
    It needs no strided rotation, which TPU v2-v4 lack and which cannot run with stride -1.
    """
    width = x.shape[1]
    row = jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
    for bit in range((x.shape[0] - 1).bit_length()):
        step = 1 << bit
        moved = pltpu.roll(x, step if direction > 0 else width - step, 1)
        x = jnp.where((row & step) != 0, moved, x)
    return x


def shift_window(wide: jax.Array, spec: TileSpec) -> jax.Array:
    """[b, 2b] scores against a window -> [b, b] tile: out[a, c] = wide[a, b - 1 - a + c]."""
    b = wide.shape[0]
    if spec.strided_roll:
        return pltpu.roll(wide, b + 1, 1, stride=1, stride_axis=0)[:, :b]
    # Every row left by b - 1 (a roll by b + 1 of 2b lanes), then row a right by a.
    return roll_rows_by_index(pltpu.roll(wide, b + 1, 1), 1)[:, :b]


def unshift_window(tile: jax.Array) -> jax.Array:
    """The transpose of shift_window: [b, b] -> [b, 2b], zero where no key maps.

    Row a moves right by b - 1 - a, a stride of -1 that Mosaic's strided roll cannot do
    (its per-vreg shift must stay under 128 lanes): all rows move by b - 1, then row a left
    by a.
    """
    b = tile.shape[0]
    wide = pltpu.roll(jnp.concatenate([tile, jnp.zeros_like(tile)], axis=1), b - 1, 1)
    return roll_rows_by_index(wide, -1)


def scores(spec: TileSpec, jb, qw, pos, seg, row, k, key):
    """Scaled, masked scores of one tile.

    Args:
      spec: the static TileSpec.
      jb: key block index.
      qw: [b, H] q + r_w of the rows; k: [b, H] keys.
      pos: float32 [b, b] positional scores of the tile (shifted window or bias tile).
      seg: float32 [b, 2] segment scores of the rows against seg_embed[same], [other].
      row: int32 [b, ROW_FIELDS]; key: int32 [KEY_FIELDS, b].

    Returns:
      (scores float32 [b, b], dead bool [b, b]: blocked or padding, other bool [b, b]:
      the key lies in another segment). Padding keys score -inf so that even a fully
      blocked row spreads over the real keys only, as the XLA path does.
    """

    def row_field(i):
        return row[:, i : i + 1]

    def key_field(i):
        return key[i : i + 1, :]

    other = row_field(masks.ROW_SEGMENT) != key_field(masks.KEY_SEGMENT)
    seg_term = jnp.where(other, seg[:, 1:2], seg[:, 0:1])
    s = (matmul.dot_t(qw, k) + pos + seg_term) * spec.scale
    blocked = masks.blocked(
        *(row_field(f) for f in (masks.SELF_RANK, masks.ROW_BLOCK, masks.ROW_POSITION)),
        *(key_field(f) for f in (masks.KEY_RANK, masks.KEY_BLOCK, masks.KEY_POSITION)),
    )
    column = jb * spec.block + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    padding = column >= spec.num_keys
    s = jnp.where(blocked, masks.BLOCKED, s)
    return jnp.where(padding, -jnp.inf, s), blocked | padding, other
