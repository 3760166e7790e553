"""Triton backward kernels (FlashAttention-2 style): each recomputes its tiles' probabilities
from the saved log-sum-exp and the dropout mask from the words; nothing [Q, K]-sized is saved.

Two kernels, so that every output has one writer and the result is deterministic (no
atomics):
  rows: grid (query blocks, B, N), loops over key blocks: d(q + r_w), the segment-score
        gradients, and the positional gradient stored with the forward's skew into a
        zero-initialised flat dBD [B, N, Qp * W] (each (row, key) owns a distinct entry);
  keys: grid (key blocks, B, N), loops over query blocks: dk and dv.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from xlnet_jax.model.kernels import masks, matmul
from xlnet_jax.model.kernels.gpu import forward as fwd
from xlnet_jax.model.kernels.gpu import tiles as tt


def _score_grads(spec, words, first_row, jb, s, dead, lse, do, v, delta):
    """(p [bq, bk] as dropped and rescaled, d scores before scaling) of one tile."""
    p = jnp.exp(s - lse[:, None])
    dp = matmul.dot_t(do, v)
    if spec.rate:
        keep = tt.kept(spec, words, first_row, jb)
        p_out = jnp.where(keep, p / (1 - spec.rate), 0.0)
        dp = jnp.where(keep, dp / (1 - spec.rate), 0.0)
    else:
        p_out = p
    ds = jnp.where(dead, 0.0, p * (dp - delta[:, None])) * spec.scale
    return p_out, ds


def _rows_kernel(spec: tt.GpuSpec, qw_ref, same_ref, other_ref, row_ref, offsets_ref, k_ref,
                 v_ref, key_ref, bd_ref, words_ref, do_ref, lse_ref, delta_ref, _zeros_ref,
                 dqw_ref, dsame_ref, dother_ref, dbd_ref):  # fmt: skip
    bq, bk = spec.block_q, spec.block_k
    first_row = pl.program_id(0) * bq
    qw, offsets, do = qw_ref[...], offsets_ref[...], do_ref[...]
    seg_same, seg_other = same_ref[...], other_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    rows = tt.row_fields(row_ref, 0, bq)
    words = words_ref[...]

    def body(jb, carry):
        dqw, dsame, dother = carry
        keys = pl.ds(jb * bk, bk)
        k, v = k_ref[keys, :], v_ref[keys, :]
        pos = tt.positional(spec, bd_ref, first_row, offsets, jb)
        s, dead, other = tt.scores(
            spec, jb, qw, k, pos, seg_same, seg_other, rows, tt.key_fields(key_ref, jb * bk, bk)
        )
        _, ds = _score_grads(spec, words, first_row, jb, s, dead, lse, do, v, delta)
        tt.skewed_store(spec, dbd_ref, first_row, offsets, jb, ds)
        dqw += jax.lax.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)
        dsame += jnp.sum(jnp.where(other, 0.0, ds), axis=1)
        dother += jnp.sum(jnp.where(other, ds, 0.0), axis=1)
        return dqw, dsame, dother

    zeros = jnp.zeros((bq,), jnp.float32)
    init = (jnp.zeros(qw.shape, jnp.float32), zeros, zeros)
    dqw, dsame, dother = jax.lax.fori_loop(0, k_ref.shape[0] // bk, body, init)
    dqw_ref[...] = dqw
    dsame_ref[...] = dsame
    dother_ref[...] = dother


def _keys_kernel(spec: tt.GpuSpec, qw_ref, same_ref, other_ref, row_ref, offsets_ref, k_ref,
                 v_ref, key_ref, bd_ref, words_ref, do_ref, lse_ref, delta_ref,
                 dk_ref, dv_ref):  # fmt: skip
    bq, bk = spec.block_q, spec.block_k
    jb = pl.program_id(0)
    k, v = k_ref[...], v_ref[...]
    keys = tt.key_fields(key_ref, 0, bk)
    words = words_ref[...]

    def body(ib, carry):
        dk, dv = carry
        first_row = ib * bq
        rows = pl.ds(first_row, bq)
        qw, do, offsets = qw_ref[rows, :], do_ref[rows, :], offsets_ref[rows]
        pos = tt.positional(spec, bd_ref, first_row, offsets, jb)
        s, dead, _ = tt.scores(
            spec, jb, qw, k, pos, same_ref[rows], other_ref[rows],
            tt.row_fields(row_ref, first_row, bq), keys,
        )  # fmt: skip
        p, ds = _score_grads(
            spec, words, first_row, jb, s, dead, lse_ref[rows], do, v, delta_ref[rows]
        )
        dv += matmul.t_dot(p.astype(do.dtype), do)
        dk += matmul.t_dot(ds.astype(qw.dtype), qw)
        return dk, dv

    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = jax.lax.fori_loop(0, qw_ref.shape[0] // bq, body, (zeros, zeros))
    dk_ref[...] = dk
    dv_ref[...] = dv


def _key_block(bk: int, *tail: int) -> pl.BlockSpec:
    """Key block j of a [B, N, Kp, *tail] or [B, KEY_FIELDS, Kp] array (grid (j, B, N))."""
    if not tail:  # the key info
        return pl.BlockSpec((None, masks.KEY_FIELDS, bk), lambda j, b, n: (b, 0, j))
    return pl.BlockSpec((None, None, bk, *tail), lambda j, b, n: (b, n, j, 0))


def backward(spec: tt.GpuSpec, x: fwd.Inputs, do, lse, delta, *, interpret: bool):
    """float32 (d qw, d seg_same, d seg_other, dk, dv) and the flat dBD in BD's dtype."""
    batch, heads, rows, width = x.qw.shape
    keys, bd_size = x.k.shape[2], x.bd.shape[2]
    bq, bk = spec.block_q, spec.block_k
    f32 = jnp.float32
    vector = jax.ShapeDtypeStruct((batch, heads, rows), f32)
    rows_out = (jax.ShapeDtypeStruct(x.qw.shape, f32), vector, vector, x.bd)
    row_specs = [
        fwd.row_block(bq, width),
        fwd.row_block(bq),
        fwd.row_block(bq),
        fwd.per_row(bq, masks.ROW_FIELDS, rows_axis=True),
        fwd.per_row(bq, rows_axis=True),
        fwd.whole(keys, width),
        fwd.whole(keys, width),
        fwd.per_row(masks.KEY_FIELDS, keys, rows_axis=False),
        fwd.whole(bd_size),
        fwd.WORDS,
    ]
    tail = (fwd.row_block(bq, width), fwd.row_block(bq), fwd.row_block(bq))
    d_qw, d_same, d_other, d_bd = pl.pallas_call(
        functools.partial(_rows_kernel, spec),
        grid=(rows // bq, batch, heads),
        in_specs=[*row_specs, *tail, fwd.whole(bd_size)],
        out_specs=[
            fwd.row_block(bq, width),
            fwd.row_block(bq),
            fwd.row_block(bq),
            fwd.whole(bd_size),
        ],  # fmt: skip
        out_shape=rows_out,
        input_output_aliases={13: 3},  # dBD starts as zeros: entries outside every window stay 0
        compiler_params=fwd.compiler_params(spec.tiles.rows),
        cost_estimate=fwd.cost(x, 3, rows_out),
        interpret=interpret,
        name="xlnet_relative_attention_triton_bwd_rows",
    )(*x.as_tuple(), do, lse, delta, jnp.zeros_like(x.bd))

    keys_out = (jax.ShapeDtypeStruct(x.k.shape, f32),) * 2
    key_specs = [
        fwd.whole(rows, width),
        fwd.whole(rows),
        fwd.whole(rows),
        fwd.per_row(rows, masks.ROW_FIELDS, rows_axis=False),
        fwd.per_row(rows, rows_axis=False),
        _key_block(bk, width),
        _key_block(bk, width),
        _key_block(bk),
        fwd.whole(bd_size),
        fwd.WORDS,
    ]
    tail = (fwd.whole(rows, width), fwd.whole(rows), fwd.whole(rows))
    d_k, d_v = pl.pallas_call(
        functools.partial(_keys_kernel, spec),
        grid=(keys // bk, batch, heads),
        in_specs=[*key_specs, *tail],
        out_specs=[_key_block(bk, width)] * 2,
        out_shape=keys_out,
        compiler_params=fwd.compiler_params(spec.tiles.keys),
        cost_estimate=fwd.cost(x, 4, keys_out),
        interpret=interpret,
        name="xlnet_relative_attention_triton_bwd_keys",
    )(*x.as_tuple(), do, lse, delta)
    return d_qw, d_same, d_other, d_k, d_v, d_bd
