"""Backward kernel (FlashAttention-2 style): recomputes each tile's probabilities from the
saved log-sum-exp and accumulates every gradient in one pass over the tiles.

Grid (B, N, key blocks j, query blocks i), i innermost. dk and dv of key block j stay in
VMEM while i runs; dq (of q + r_w and of q + r_r), the segment-score gradient and the
windowed k_r gradient are resident for a whole (row, head), so the overlapping k_r windows of
different tiles add up in VMEM, never through a [Q, K]-sized buffer in HBM. The query stream
writes its positional-bias gradient tile by tile instead (it is its own [B, N, P, K] input).
With dropatt (FlashAttention-2's dropout): the mask is recomputed from the words, dv takes
the dropped probabilities, dP is masked and rescaled, and dS = P * (dP - delta) with P
undropped and delta = rowsum(dO * O) of the dropped output.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlnet_jax.model.kernels import matmul
from xlnet_jax.model.kernels.tpu import forward, tiles


def _kernel(spec: tiles.TileSpec, *refs):
    qw_ref, seg_ref, row_ref, k_ref, v_ref, key_ref, pos_ref, *refs = refs
    qr_ref, words_ref = forward.optional_refs(spec, refs)
    do_ref, lse_ref, delta_ref, dqw_ref, dseg_ref, dk_ref, dv_ref, *refs = refs
    jb, ib = pl.program_id(2), pl.program_id(3)
    b = spec.block

    @pl.when((jb == 0) & (ib == 0))
    def _init_rows():
        for ref in (dqw_ref, dseg_ref, *(refs if spec.windowed else ())):
            ref[...] = jnp.zeros_like(ref)

    @pl.when(ib == 0)
    def _init_keys():
        dk_ref[...] = jnp.zeros_like(dk_ref)
        dv_ref[...] = jnp.zeros_like(dv_ref)

    qw, k, v, do = qw_ref[...], k_ref[...], v_ref[...], do_ref[...]
    pos = forward.positional_tile(spec, pos_ref, qr_ref, ib, jb)
    s, dead, other = tiles.scores(spec, jb, qw, pos, seg_ref[...], row_ref[...], k, key_ref[...])
    p = jnp.exp(s - lse_ref[...])
    dp = matmul.dot_t(do, v)
    p_out = p
    if spec.dropatt:
        kept = tiles.dropout_scale(spec, words_ref[...], ib, jb)
        p_out, dp = p * kept, dp * kept
    ds = jnp.where(dead, 0.0, p * (dp - delta_ref[...])) * spec.scale

    dv_ref[...] += matmul.t_dot(p_out.astype(do.dtype), do)
    dk_ref[...] += matmul.t_dot(ds.astype(qw.dtype), qw)
    rows = pl.ds(pl.multiple_of(ib * b, b), b)
    dqw_ref[rows, :] += jax.lax.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)
    dseg_ref[rows, :] += jnp.concatenate(
        [
            jnp.sum(jnp.where(other, 0.0, ds), axis=1, keepdims=True),
            jnp.sum(jnp.where(other, ds, 0.0), axis=1, keepdims=True),
        ],
        axis=1,
    )
    if spec.windowed:
        dqr_ref, dkr_ref = refs
        start, win = tiles.window(pos_ref, spec, ib, jb)
        d_wide = tiles.unshift_window(ds).astype(win.dtype)
        dqr_ref[rows, :] += jax.lax.dot(d_wide, win, preferred_element_type=jnp.float32)
        dkr_ref[pl.ds(start, 2 * b), :] += matmul.t_dot(d_wide, qr_ref[...])
    else:
        (dbias_ref,) = refs
        dbias_ref[...] = ds


def _key_major(spec: pl.BlockSpec) -> pl.BlockSpec:
    """A forward block spec (grid (B, N, i, j)) on this kernel's grid (B, N, j, i)."""
    index_map = spec.index_map
    return pl.BlockSpec(spec.block_shape, lambda b_, n, j, i: index_map(b_, n, i, j))


def _resident_spec(shape: tuple[int, ...]) -> pl.BlockSpec:
    """All of [B, N, *shape] for one (row, head): stays in VMEM over the j and i loops."""
    return pl.BlockSpec((None, None, *shape), lambda b_, n, j, i: (b_, n, 0, 0))


def _in_specs(spec: tiles.TileSpec, qw, pos_source) -> list[pl.BlockSpec]:
    """The forward's inputs, then (d out, lse, delta) per query block."""
    b, width = spec.block, qw.shape[-1]
    rows = [forward.q_spec(b, width), forward.q_spec(b, 1), forward.q_spec(b, 1)]
    return [_key_major(s) for s in (*forward.in_specs(spec, qw, pos_source), *rows)]


def backward(spec, qw, qr, seg, k, v, pos_source, row, key, words, do, lse, delta, *, interpret):
    """Float32 gradients of one stream (words as `forward.forward`).

    Returns:
      (d qw, d seg, dk, dv, d qr, d k_r [B, N, R, H]) for the content stream (windowed), or
      (d qw, d seg, dk, dv, d bias [B, N, Qp, Kp]) for the query stream.
    """
    batch, heads, rows, width = qw.shape
    keys, b = k.shape[2], spec.block
    f32 = jnp.float32

    def out(shape):
        return jax.ShapeDtypeStruct((batch, heads, *shape), f32)

    out_shape = [out((rows, width)), out((rows, 2)), out((keys, width)), out((keys, width))]
    key_block = _key_major(forward.k_spec(b, width))
    out_specs = [_resident_spec((rows, width)), _resident_spec((rows, 2)), key_block, key_block]
    if spec.windowed:
        out_shape += [out((rows, width)), out(pos_source.shape[2:])]
        out_specs += [_resident_spec((rows, width)), _resident_spec(pos_source.shape[2:])]
    else:
        out_shape.append(out((rows, keys)))
        out_specs.append(_key_major(forward.positional_spec(spec, pos_source)))  # the bias tile
    operands = (
        qw, seg, row, k, v, key, pos_source,
        *forward.optional_inputs(spec, qr, words), do, lse, delta,
    )  # fmt: skip
    return pl.pallas_call(
        functools.partial(_kernel, spec),
        grid=(batch, heads, keys // b, rows // b),
        in_specs=_in_specs(spec, qw, pos_source),
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary", "arbitrary")
        ),
        cost_estimate=forward.cost(spec, qw, k, pos_source, (*operands, *out_shape), False),
        interpret=interpret,
        name="xlnet_relative_attention_bwd",
    )(*operands)
