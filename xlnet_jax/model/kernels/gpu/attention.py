"""XLNet relative attention of one stream through the Triton kernels, with a custom VJP.

Takes what `tpu.attention.relative_attention` takes (plus the dropout words and rate) and
returns the same. The positional scores BD = (q + r_r) . k_r^T are one batched matmul in the
compute dtype, laid out so that every tile's skewed window is one contiguous, aligned run
(`positional_layout`), inside the custom VJP: the forward computes it, the backward
recomputes it (no [Q, K]-sized residual), and turns the kernel's dBD into d(q + r_r) and
dk_r through the same layout's VJP (plain matmuls, pads and selects).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from xlnet_jax.model.kernels.gpu import tiles as tt
from xlnet_jax.model.kernels.gpu.backward import backward
from xlnet_jax.model.kernels.gpu.forward import Inputs, forward

# Smallest head width: Triton's dot needs at least 16 along every dimension.
MIN_WIDTH = 16


# Tiles for every shape (tests and tile sweeps set it); None: `gpu_tiles` chooses per shape.
GPU_TILES: tt.Tiles | None = None


def gpu_tiles(num_rows: int, num_keys: int, d_head: int) -> tt.Tiles:
    """The tiles of a stream's shape; the table is checked on sm_90 by tests/test_gpu_compile.py
    (no spills, warpgroup MMAs, shared memory far under an H100's 227 KB per block) and its
    figures are in docs/kernel-gpu.md.

    64 x 64 tiles for every head width up to 64: wgmma's instruction is 64 rows per
    warpgroup (smaller row tiles fall back to mma.sync), and 128-row tiles double the float32
    accumulators and scores per thread, already at 252-255 registers at 64. Forward: one
    [64, H] accumulator, 4 warps, 3 stages (k, v and the positional tile in flight through
    cp.async). Rows backward: 4 warps, 2 stages. Keys backward (two [64, H] accumulators and
    the most live tiles): 8 warps (two warpgroups halve the registers per thread) and 1 stage;
    with 2 stages it spills 16 bytes. Wider heads double every accumulator: 8 warps, 1 stage
    everywhere (unchecked: no config has them). Short shapes take the smallest tile (16, what
    a Triton dot needs) that covers them.
    """
    if GPU_TILES is not None:
        return GPU_TILES
    block = max(MIN_WIDTH, min(64, pl.next_power_of_2(min(num_rows, num_keys))))
    if d_head > 64:
        wide = tt.Launch(8, 1)
        return tt.Tiles(block, wide, wide, wide)
    return tt.Tiles(block, forward=tt.Launch(4, 3), rows=tt.Launch(4, 2), keys=tt.Launch(8, 1))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Static shape of the flat positional scores (`positional_layout`).

    Attributes:
      width: W, BD's columns per row before flattening.
      shifted: the query stream: each row moved right by its own shift (< ALIGN) so that its
        window starts aligned; the content stream reads rows `pitch = W - 1` apart instead.
    """

    width: int
    shifted: bool

    @property
    def pitch(self) -> int:
        return self.width if self.shifted else self.width - 1


def positional_layout(layout: Layout, qr: jax.Array, k_r: jax.Array, shift) -> jax.Array:
    """BD = (q + r_r) . k_r^T [B, N, Qp * W] in qr's dtype, flat, so that row r meets key j at
    `r * pitch + offset[r] + j` (offset a multiple of tiles.ALIGN: `_offsets`).

    qr [B, N, Qp, Hp]; k_r [1|B, N, rows, Hp], its rows zero-padded in front (relative_attention)
    so that row c of BD is distance index c - front. Content stream (row r at position r): BD
    read with pitch W - 1 meets BD[r, offset - r + j], a uniform skew for free. Query stream
    (rows at any position t): each row is moved right by its shift s = -start mod ALIGN (one
    select among ALIGN slices), so that its window `start + s` is aligned.
    """
    k_r = jnp.broadcast_to(k_r, (qr.shape[0], *k_r.shape[1:]))
    bd = jnp.einsum("bnqh,bnrh->bnqr", qr, k_r, preferred_element_type=qr.dtype)
    if layout.shifted:
        front = tt.ALIGN - 1
        moved = bd[..., front : front + layout.width]
        for s in range(1, tt.ALIGN):
            window = bd[..., front - s : front - s + layout.width]
            moved = jnp.where((shift == s)[:, None, :, None], window, moved)
        bd = moved
    return bd.reshape(*bd.shape[:2], -1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _attend(spec, layout, interpret, *args):
    return forward(spec, _inputs(layout, *args), interpret=interpret)[0]


def _attend_fwd(spec, layout, interpret, *args):
    out, lse = forward(spec, _inputs(layout, *args), interpret=interpret)
    return out, (args, out, lse)


def _inputs(layout, qw, seg_same, seg_other, row, offsets, k, v, key, qr, k_r, shift, words):
    bd = positional_layout(layout, qr, k_r, shift)
    return Inputs(qw, seg_same, seg_other, row, offsets, k, v, key, bd, words)


def _attend_bwd(spec, layout, interpret, residuals, d_out):
    args, out, lse = residuals
    qw, *_, k, v, _, qr, k_r, shift, _ = args
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    d_qw, d_same, d_other, d_k, d_v, d_bd = backward(
        spec, _inputs(layout, *args), d_out, lse, delta, interpret=interpret
    )
    _, layout_vjp = jax.vjp(functools.partial(positional_layout, layout, shift=shift), qr, k_r)
    d_qr, d_kr = layout_vjp(d_bd)
    return (
        d_qw.astype(qw.dtype),
        d_same,
        d_other,
        None,
        None,
        d_k.astype(k.dtype),
        d_v.astype(v.dtype),
        None,
        d_qr,
        d_kr,
        None,
        None,
    )


_attend.defvjp(_attend_fwd, _attend_bwd)


def _pad(x: jax.Array, axis: int, size: int, before: int = 0) -> jax.Array:
    """x zero-padded along `axis`, `before` entries in front, to `size` entries in all."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (before, size - before - x.shape[axis])
    return jnp.pad(x, widths)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _heads_first(x: jax.Array, size: int, width: int) -> jax.Array:
    """[B, T, N, H] -> [B, N, size, width], zero-padded along T and H."""
    return _pad(_pad(jnp.swapaxes(x, 1, 2), 2, size), 3, width)


def relative_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    k_r: jax.Array,
    biases: tuple[jax.Array, jax.Array, jax.Array],
    seg_embed: jax.Array,
    row: jax.Array,
    key: jax.Array,
    positions: jax.Array | None,
    words: jax.Array,
    rate: float,
    *,
    interpret: bool,
) -> jax.Array:
    """Softmax attention of one stream's query rows over [memory ; segment] keys, on Triton.

    Args:
      q, k, v, k_r, biases, seg_embed, row, key, positions: as
        `tpu.attention.relative_attention` (positions None: the content stream).
      words: uint32 [B, N] dropout words of this stream and layer (dropout.row_head_words).
      rate: attention dropout probability (static; 0 disables it and ignores words).
      interpret: run in Pallas interpret mode (any platform) instead of lowering to Triton.

    Returns:
      [B, Q, N, H] attention output in q's dtype (before the output projection).
    """
    r_w, r_r, r_s = biases
    batch, num_rows, _, d_head = q.shape
    num_keys = k.shape[1]
    seg_len = k_r.shape[1] - num_keys
    tiles = gpu_tiles(num_rows, num_keys, d_head)
    b = tiles.block
    rows_p, keys_p = -(-num_rows // b) * b, -(-num_keys // b) * b
    width = max(MIN_WIDTH, pl.next_power_of_2(d_head))
    seg = jnp.einsum("bqnh,snh->bnqs", q + r_s, seg_embed, preferred_element_type=jnp.float32)
    seg = _pad(seg, 2, rows_p)
    k_r = jnp.swapaxes(k_r, 1, 2)
    if positions is None:
        # Row r reads BD[r, offset - r + j] = distance index seg_len - r + j when k_r has
        # offset - seg_len zero rows in front; offset >= rows_p - 1 keeps every read in bounds
        # and every (row, key) on its own entry, padding rows included.
        offset = _round_up(max(seg_len, rows_p - 1), tt.ALIGN)
        layout = Layout(offset + keys_p + 1, shifted=False)
        k_r = _pad(_pad(k_r, 2, layout.width, before=offset - seg_len), 3, width)
        offsets = jnp.full((batch, rows_p), offset // tt.ALIGN, jnp.int32)
        shift = None
    else:
        # Row r's window starts at seg_len - t (t its position; padding rows: t = 0), moved
        # right by its shift to the next multiple of ALIGN; k_r has ALIGN - 1 rows in front.
        layout = Layout(_round_up(seg_len, tt.ALIGN) + keys_p, shifted=True)
        start = seg_len - _pad(positions.astype(jnp.int32), 1, rows_p)
        shift = -start % tt.ALIGN
        offsets = (start + shift) // tt.ALIGN
        rows = layout.width + tt.ALIGN - 1
        k_r = _pad(_pad(k_r, 2, rows, before=tt.ALIGN - 1), 3, width)
    spec = tt.GpuSpec(tiles, d_head**-0.5, num_keys, rate, layout.pitch)
    out = _attend(
        spec,
        layout,
        interpret,
        _heads_first(q + r_w, rows_p, width),
        seg[..., 0],
        seg[..., 1],
        _pad(row, 1, rows_p),
        offsets,
        _heads_first(k, keys_p, width),
        _heads_first(v, keys_p, width),
        _pad(key, 2, keys_p),
        _heads_first(q + r_r, rows_p, width),
        k_r,
        shift,
        words.astype(jnp.uint32),
    )
    return jnp.swapaxes(out[:, :, :num_rows, :d_head], 1, 2)
