"""XLNet relative attention of one stream through the Triton kernels, with a custom VJP.

Takes what `tpu.attention.relative_attention` takes (plus the dropout words and rate)
and returns the same. The positional scores BD = (q + r_r) . k_r^T are one batched matmul
in the compute dtype, inside the custom VJP: the forward computes it, the backward
recomputes it (so no [Q, K]-sized residual exists, which matters under
`platform_dependent`, whose differentiation keeps every branch's residuals), and turns the
kernel's dBD into d(q + r_r) = dBD . k_r and dk_r = dBD^T . (q + r_r) by plain matmuls.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from xlnet_jax.model.kernels.gpu import tiles as tt
from xlnet_jax.model.kernels.gpu.backward import backward
from xlnet_jax.model.kernels.gpu.forward import Inputs, forward

# Rows and keys per tile on the GPU (a power of two, as Triton needs), and Triton's warps
# and pipeline stages per program: untuned (no GPU has run the kernel yet).
GPU_BLOCK = 64
GPU_WARPS = 4
GPU_STAGES = 2
# Smallest head width: Triton's dot needs at least 16 along every dimension.
MIN_WIDTH = 16


def _positional_scores(qr: jax.Array, k_r: jax.Array) -> jax.Array:
    """BD [B, N, Qp, W] = (q + r_r) . k_r^T in qr's dtype (qr [B, N, Qp, H], k_r [1|B, N, W, H]).

    A k_r shared by the rows is broadcast first: batched over (B, N), the product is written
    in BD's layout, not as [N, W, B, Qp] and then transposed."""
    k_r = jnp.broadcast_to(k_r, (qr.shape[0], *k_r.shape[1:]))
    return jnp.einsum("bnqh,bnrh->bnqr", qr, k_r, preferred_element_type=qr.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _attend(spec, interpret, *args):
    return forward(spec, _inputs(*args), interpret=interpret)[0]


def _attend_fwd(spec, interpret, *args):
    out, lse = forward(spec, _inputs(*args), interpret=interpret)
    return out, (args, out, lse)


def _inputs(qw, seg_same, seg_other, row, start, k, v, key, qr, k_r, words) -> Inputs:
    bd = _positional_scores(qr, k_r)
    return Inputs(qw, seg_same, seg_other, row, start, k, v, key, bd, words)


def _attend_bwd(spec, interpret, residuals, d_out):
    args, out, lse = residuals
    qw, *_, k, v, _, qr, k_r, _ = args
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    d_qw, d_same, d_other, d_k, d_v, d_bd = backward(
        spec, _inputs(*args), d_out, lse, delta, interpret=interpret
    )
    d_qr = jnp.einsum("bnqr,bnrh->bnqh", d_bd, k_r, preferred_element_type=jnp.float32)
    d_kr = jnp.einsum("bnqr,bnqh->bnrh", d_bd, qr, preferred_element_type=jnp.float32)
    if k_r.shape[0] == 1:  # one k_r for every row (no bi_data)
        d_kr = jnp.sum(d_kr, axis=0, keepdims=True)
    return (
        d_qw.astype(qw.dtype),
        d_same,
        d_other,
        None,
        None,
        d_k.astype(k.dtype),
        d_v.astype(v.dtype),
        None,
        d_qr.astype(qr.dtype),
        d_kr.astype(k_r.dtype),
        None,
    )


_attend.defvjp(_attend_fwd, _attend_bwd)


def _pad(x: jax.Array, axis: int, size: int, value=0) -> jax.Array:
    """x padded with `value` at the end of `axis` to `size` entries."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


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
    block: int | None = None,
) -> jax.Array:
    """Softmax attention of one stream's query rows over [memory ; segment] keys, on Triton.

    Args:
      q, k, v, k_r, biases, seg_embed, row, key, positions: as
        `tpu.attention.relative_attention` (positions None: the content stream).
      words: uint32 [B, N] dropout words of this stream and layer (dropout.row_head_words).
      rate: attention dropout probability (static; 0 disables it and ignores words).
      interpret: run in Pallas interpret mode (any platform) instead of lowering to Triton.
      block: rows and keys per tile (a power of two); None: GPU_BLOCK.

    Returns:
      [B, Q, N, H] attention output in q's dtype (before the output projection).
    """
    r_w, r_r, r_s = biases
    batch, num_rows, _, d_head = q.shape
    num_keys = k.shape[1]
    seg_len = k_r.shape[1] - num_keys
    b = block or GPU_BLOCK
    rows_p, keys_p = -(-num_rows // b) * b, -(-num_keys // b) * b
    width = max(MIN_WIDTH, pl.next_power_of_2(d_head))
    seg = jnp.einsum("bqnh,snh->bnqs", q + r_s, seg_embed, preferred_element_type=jnp.float32)
    seg = _pad(seg, 2, rows_p)
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(num_rows, dtype=jnp.int32), (batch, num_rows))
    start = seg_len - _pad(positions.astype(jnp.int32), 1, rows_p)
    # k_r rows padded so that every window, padding keys included, lies inside BD.
    k_r = _heads_first(k_r, seg_len + keys_p, width)
    spec = tt.GpuSpec(b, b, d_head**-0.5, num_keys, rate, GPU_WARPS, GPU_STAGES)
    out = _attend(
        spec,
        interpret,
        _heads_first(q + r_w, rows_p, width),
        seg[..., 0],
        seg[..., 1],
        _pad(row, 1, rows_p),
        start,
        _heads_first(k, keys_p, width),
        _heads_first(v, keys_p, width),
        _pad(key, 2, keys_p),
        _heads_first(q + r_r, rows_p, width),
        k_r,
        words.astype(jnp.uint32),
    )
    return jnp.swapaxes(out[:, :, :num_rows, :d_head], 1, 2)
