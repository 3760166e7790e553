"""Triton forward kernel: online softmax over key blocks; writes the output and log-sum-exp.

Grid (query blocks, B, N); each program loops over the key blocks. Inputs are head-major and
padded: q-side [B, N, Qp, H], k-side [B, N, Kp, H], BD flat [B, N, Qp * W], per-row vectors
[B, N, Qp] or [B, Qp]. The normaliser comes from the undropped probabilities; the output
from the dropped, rescaled ones (as dropout after softmax on the XLA path).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from xlnet_jax.model.kernels import cost as kernel_cost
from xlnet_jax.model.kernels import masks
from xlnet_jax.model.kernels.gpu import tiles as tt


@dataclasses.dataclass(frozen=True)
class Inputs:
    """One stream's kernel inputs (head-major, padded to whole blocks)."""

    qw: jax.Array  # [B, N, Qp, H] q + r_w
    seg_same: jax.Array  # float32 [B, N, Qp] (q + r_s) . seg_embed[0]
    seg_other: jax.Array  # float32 [B, N, Qp] (q + r_s) . seg_embed[1]
    row: jax.Array  # int32 [B, Qp, ROW_FIELDS]
    offsets: jax.Array  # int32 [B, Qp]: where the row's window begins in bd, / tiles.ALIGN
    k: jax.Array  # [B, N, Kp, H]
    v: jax.Array  # [B, N, Kp, H]
    key: jax.Array  # int32 [B, KEY_FIELDS, Kp]
    bd: jax.Array  # [B, N, Qp * W] (q + r_r) . k_r^T, flat (attention.positional_layout)
    words: jax.Array  # uint32 [B, N] dropout words

    def as_tuple(self) -> tuple[jax.Array, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


def _kernel(spec: tt.GpuSpec, qw_ref, same_ref, other_ref, row_ref, offsets_ref, k_ref, v_ref,
            key_ref, bd_ref, words_ref, out_ref, lse_ref):  # fmt: skip
    bq, bk = spec.block_q, spec.block_k
    first_row = pl.program_id(0) * bq
    qw, offsets = qw_ref[...], offsets_ref[...]
    seg_same, seg_other = same_ref[...], other_ref[...]
    rows = tt.row_fields(row_ref, 0, bq)
    words = words_ref[...]

    def body(jb, carry):
        acc, m_prev, l_prev = carry
        keys = pl.ds(jb * bk, bk)
        k, v = k_ref[keys, :], v_ref[keys, :]
        pos = tt.positional(spec, bd_ref, first_row, offsets, jb)
        s, _, _ = tt.scores(
            spec, jb, qw, k, pos, seg_same, seg_other, rows, tt.key_fields(key_ref, jb * bk, bk)
        )
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new[:, None])
        l_new = alpha * l_prev + jnp.sum(p, axis=1)
        if spec.rate:
            p = jnp.where(tt.kept(spec, words, first_row, jb), p / (1 - spec.rate), 0.0)
        acc = alpha[:, None] * acc + jax.lax.dot(
            p.astype(v.dtype), v, preferred_element_type=jnp.float32
        )
        return acc, m_new, l_new

    acc = jnp.zeros(qw.shape, jnp.float32)
    m = jnp.full((bq,), -jnp.inf, jnp.float32)
    l_sum = jnp.zeros((bq,), jnp.float32)
    acc, m, l_sum = jax.lax.fori_loop(0, k_ref.shape[0] // bk, body, (acc, m, l_sum))
    out_ref[...] = (acc / l_sum[:, None]).astype(out_ref.dtype)
    lse_ref[...] = m + jnp.log(l_sum)


def row_block(bq: int, *tail: int) -> pl.BlockSpec:
    """Query block i of a [B, N, Qp, *tail] array (grid (i, B, N))."""
    zeros = (0,) * len(tail)
    return pl.BlockSpec((None, None, bq, *tail), lambda i, b, n: (b, n, i, *zeros))


def whole(*shape: int) -> pl.BlockSpec:
    """All of [B, N, *shape] for one (row, head)."""
    zeros = (0,) * len(shape)
    return pl.BlockSpec((None, None, *shape), lambda i, b, n: (b, n, *zeros))


def per_row(*shape: int, rows_axis: bool) -> pl.BlockSpec:
    """[B, *shape] arrays (no head axis): query block i of axis 1 (rows_axis), else whole."""
    zeros = (0,) * (len(shape) - 1)
    if rows_axis:
        return pl.BlockSpec((None, *shape), lambda i, b, n: (b, i, *zeros))
    return pl.BlockSpec((None, *shape), lambda i, b, n: (b, 0, *zeros))


WORDS = pl.BlockSpec((None, None), lambda i, b, n: (b, n))


def compiler_params(launch: tt.Launch) -> pltriton.CompilerParams:
    """Explicitly Triton: jax_pallas_use_mosaic_gpu would otherwise send the call to Mosaic GPU."""
    return pltriton.CompilerParams(num_warps=launch.warps, num_stages=launch.stages)


def cost(x: Inputs, matmuls: int, outputs: tuple[jax.ShapeDtypeStruct, ...]) -> pl.CostEstimate:
    """`matmuls` [Qp, Kp, H] products per (row, head) over x's operands and `outputs`."""
    keys = x.k.shape[2]
    return kernel_cost.estimate(x.qw, matmuls * keys, keys, (*x.as_tuple(), *outputs))


def forward(spec: tt.GpuSpec, x: Inputs, *, interpret: bool):
    """(out [B, N, Qp, H] in qw's dtype, lse float32 [B, N, Qp]) of one stream."""
    batch, heads, rows, width = x.qw.shape
    keys, bd_size = x.k.shape[2], x.bd.shape[2]
    bq = spec.block_q
    out_shape = (
        jax.ShapeDtypeStruct(x.qw.shape, x.qw.dtype),
        jax.ShapeDtypeStruct((batch, heads, rows), jnp.float32),
    )
    return pl.pallas_call(
        functools.partial(_kernel, spec),
        grid=(rows // bq, batch, heads),
        in_specs=[
            row_block(bq, width),
            row_block(bq),
            row_block(bq),
            per_row(bq, masks.ROW_FIELDS, rows_axis=True),
            per_row(bq, rows_axis=True),
            whole(keys, width),
            whole(keys, width),
            per_row(masks.KEY_FIELDS, keys, rows_axis=False),
            whole(bd_size),
            WORDS,
        ],
        out_specs=[row_block(bq, width), row_block(bq)],
        out_shape=out_shape,
        compiler_params=compiler_params(spec.tiles.forward),
        cost_estimate=cost(x, 2, out_shape),
        interpret=interpret,
        name="xlnet_relative_attention_triton_fwd",
    )(*x.as_tuple())
