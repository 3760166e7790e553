"""Forward kernel: online softmax over key blocks; writes the output and log-sum-exp only.

Grid (B, N, query blocks, key blocks), the key axis innermost and sequential. Inputs are
head-major and padded to the block: q-side [B, N, Qp, H], k-side [B, N, Kp, H]. With
dropatt, the normaliser and the log-sum-exp sum the undropped probabilities and the output
accumulates the dropped, rescaled ones (softmax, then dropout, as the XLA path).
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlnet_jax.model.kernels import cost as kernel_cost
from xlnet_jax.model.kernels import masks, matmul
from xlnet_jax.model.kernels.tpu import tiles


def positional_tile(spec: tiles.TileSpec, pos_ref, qr_ref, ib, jb) -> jax.Array:
    """float32 [b, b] positional scores: the shifted window, or the bias tile."""
    if spec.windowed:
        _, win = tiles.window(pos_ref, spec, ib, jb)
        return tiles.shift_window(matmul.dot_t(qr_ref[...], win), spec)
    return pos_ref[...].astype(jnp.float32)


def optional_refs(spec: tiles.TileSpec, refs: list) -> tuple:
    """(qr_ref or None, words_ref or None), popped from the front of refs."""
    qr_ref = refs.pop(0) if spec.windowed else None
    words_ref = refs.pop(0) if spec.dropatt else None
    return qr_ref, words_ref


def optional_inputs(spec: tiles.TileSpec, qr, words) -> list:
    """The inputs after pos_source: qr (content stream), words [B, N, 1, 1] (dropatt)."""
    return ([qr] if spec.windowed else []) + ([words] if spec.dropatt else [])


def _kernel(spec: tiles.TileSpec, *refs):
    qw_ref, seg_ref, row_ref, k_ref, v_ref, key_ref, pos_ref, *refs = refs
    qr_ref, words_ref = optional_refs(spec, refs)
    out_ref, lse_ref, m_scr, l_scr, acc_scr = refs
    ib, jb = pl.program_id(2), pl.program_id(3)

    @pl.when(jb == 0)
    def _init():
        m_scr[...] = jnp.full_like(m_scr, -jnp.inf)
        l_scr[...] = jnp.zeros_like(l_scr)
        acc_scr[...] = jnp.zeros_like(acc_scr)

    pos = positional_tile(spec, pos_ref, qr_ref, ib, jb)
    s, _, _ = tiles.scores(
        spec, jb, qw_ref[...], pos, seg_ref[...], row_ref[...], k_ref[...], key_ref[...]
    )
    m_prev = m_scr[...]
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    alpha = jnp.exp(m_prev - m_new)
    p = jnp.exp(s - m_new)
    l_scr[...] = alpha * l_scr[...] + jnp.sum(p, axis=1, keepdims=True)
    if spec.dropatt:
        p *= tiles.dropout_scale(spec, words_ref[...], ib, jb)
    v = v_ref[...]
    acc_scr[...] = alpha * acc_scr[...] + jax.lax.dot(
        p.astype(v.dtype), v, preferred_element_type=jnp.float32
    )
    m_scr[...] = m_new

    @pl.when(jb == pl.num_programs(3) - 1)
    def _finish():
        out_ref[...] = (acc_scr[...] / l_scr[...]).astype(out_ref.dtype)
        lse_ref[...] = m_scr[...] + jnp.log(l_scr[...])


def q_spec(b: int, width: int) -> pl.BlockSpec:
    """Block of a q-side array [B, N, Qp, width] at query block i (grid (B, N, i, j))."""
    return pl.BlockSpec((None, None, b, width), lambda b_, n, i, j: (b_, n, i, 0))


def k_spec(b: int, width: int) -> pl.BlockSpec:
    """Block of a k-side array [B, N, Kp, width] at key block j (grid (B, N, i, j))."""
    return pl.BlockSpec((None, None, b, width), lambda b_, n, i, j: (b_, n, j, 0))


def positional_spec(spec: tiles.TileSpec, pos_source: jax.Array) -> pl.BlockSpec:
    """The whole padded k_r of a row and head (window), or the [b, b] bias tile (i, j)."""
    if spec.windowed:
        shared = pos_source.shape[0] == 1  # one k_r for all rows unless bi_data

        def kr_index(b_, n, i, j):
            return (0 if shared else b_, n, 0, 0)

        return pl.BlockSpec((None, None, *pos_source.shape[2:]), kr_index)
    b = spec.block
    return pl.BlockSpec((None, None, b, b), lambda b_, n, i, j: (b_, n, i, j))


def in_specs(spec: tiles.TileSpec, qw, pos_source) -> list[pl.BlockSpec]:
    """Specs of (qw, seg, row, k, v, key, pos_source[, qr][, words]) over the grid (B, N, i, j)."""
    b, width = spec.block, qw.shape[-1]
    specs = [
        q_spec(b, width),
        q_spec(b, 2),
        pl.BlockSpec((None, b, masks.ROW_FIELDS), lambda b_, n, i, j: (b_, i, 0)),
        k_spec(b, width),
        k_spec(b, width),
        pl.BlockSpec((None, masks.KEY_FIELDS, b), lambda b_, n, i, j: (b_, 0, j)),
        positional_spec(spec, pos_source),
    ]
    words = pl.BlockSpec((None, None, 1, 1), lambda b_, n, i, j: (b_, n, 0, 0))
    return specs + optional_inputs(spec, q_spec(b, width), words)


def cost(spec: tiles.TileSpec, qw, k, pos_source, arrays: tuple, forward_pass: bool):
    """XLA's estimate of a forward or backward call, counted as the XLA path counts the same
    attention, so that MFU from XLA's figure compares across paths: per (row, head), q.k and
    p.v over the keys, and the positional scores over the R relative encodings (content
    stream; the query stream's bias is XLA's own op); the backward twice that (dq, dk, dv,
    dP, and d(q + r_r), dk_r), not its recomputed scores nor the shifted windows' overlap."""
    keys = k.shape[2]
    products = 2 * keys + (pos_source.shape[2] if spec.windowed else 0)
    return kernel_cost.estimate(qw, products if forward_pass else 2 * products, keys, arrays)


def forward(spec: tiles.TileSpec, qw, qr, seg, k, v, pos_source, row, key, words, *, interpret):
    """(out [B, N, Qp, H] in qw's dtype, lse float32 [B, N, Qp, 1]) of one stream.

    words: uint32 [B, N, 1, 1], the dropout word of each (row, head); None without dropatt.
    """
    batch, heads, rows, width = qw.shape
    b = spec.block
    grid = (batch, heads, rows // b, k.shape[2] // b)
    out_shape = [
        jax.ShapeDtypeStruct(qw.shape, qw.dtype),
        jax.ShapeDtypeStruct((batch, heads, rows, 1), jnp.float32),
    ]
    operands = (qw, seg, row, k, v, key, pos_source, *optional_inputs(spec, qr, words))
    return pl.pallas_call(
        functools.partial(_kernel, spec),
        grid=grid,
        in_specs=in_specs(spec, qw, pos_source),
        out_specs=[q_spec(b, width), q_spec(b, 1)],
        out_shape=out_shape,
        scratch_shapes=[
            pltpu.VMEM((b, 1), jnp.float32),
            pltpu.VMEM((b, 1), jnp.float32),
            pltpu.VMEM((b, width), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")
        ),
        cost_estimate=cost(spec, qw, k, pos_source, (*operands, *out_shape), forward_pass=True),
        interpret=interpret,
        name="xlnet_relative_attention_fwd",
    )(*operands)
