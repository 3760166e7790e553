"""XLNet relative attention of one stream through the Pallas kernels, with a custom VJP.

`relative_attention` takes the model's [B, T, N, H] projections, adds the three biases,
precomputes what is O(B·N·Q) (the two segment-score columns per row) and, for the query
stream only, the [B, N, P, K] positional bias; then runs `forward` / `backward` on
head-major arrays padded to the block. Gradients of the biases, seg_embed and (for the
query stream) k_r flow through these few XLA ops by ordinary autodiff.

Platform: the kernels lower through Mosaic on TPU and run in Pallas interpret mode
elsewhere (CPU tests); the choice is made per lowering platform, so an AOT compile for a
TPU topology from a CPU host gets the Mosaic kernel.
"""

import functools

import jax
import jax.numpy as jnp

from xlnet_jax.model.kernels.tpu import tiles
from xlnet_jax.model.kernels.tpu.backward import backward
from xlnet_jax.model.kernels.tpu.forward import forward
from xlnet_jax.model.position import scores_by_key

# Rows and keys per tile. Keys lie along the 128 lanes of a TPU vreg, and Mosaic rotates
# and slices only lane-aligned tiles ("unsupported unaligned shape" otherwise), so every
# shape is padded to whole tiles of 128, short sequences included.
TPU_BLOCK = 128


def _on_platform(fn, *args):
    """fn(*args, interpret=False) when lowered for TPU, else in interpret mode."""
    return jax.lax.platform_dependent(
        *args,
        tpu=functools.partial(fn, interpret=False),
        default=functools.partial(fn, interpret=True),
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(spec: tiles.TileSpec, qw, qr, seg, k, v, pos_source, row, key, words):
    args = (qw, qr, seg, k, v, pos_source, row, key, words)
    return _on_platform(functools.partial(forward, spec), *args)[0]


def _attend_fwd(spec, qw, qr, seg, k, v, pos_source, row, key, words):
    args = (qw, qr, seg, k, v, pos_source, row, key, words)
    out, lse = _on_platform(functools.partial(forward, spec), *args)
    return out, (args, out, lse)


def _attend_bwd(spec, residuals, d_out):
    args, out, lse = residuals
    qw, qr, seg, k, v, pos_source = args[:6]
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
    grads = _on_platform(functools.partial(backward, spec), *args, d_out, lse, delta)
    d_qw, d_seg, d_k, d_v = grads[:4]
    if spec.windowed:
        d_qr, d_pos = grads[4:]
        if pos_source.shape[0] == 1:  # k_r shared by every row (no bi_data)
            d_pos = jnp.sum(d_pos, axis=0, keepdims=True)
        d_qr = d_qr.astype(qr.dtype)
    else:
        d_qr, d_pos = None, grads[4]
    return (
        d_qw.astype(qw.dtype),
        d_qr,
        d_seg,
        d_k.astype(k.dtype),
        d_v.astype(v.dtype),
        d_pos.astype(pos_source.dtype),
        None,
        None,
        None,
    )


_attend.defvjp(_attend_fwd, _attend_bwd)


def _pad_axis(x: jax.Array, axis: int, before: int, size: int) -> jax.Array:
    """x zero-padded along `axis` with `before` leading entries, to `size` entries in all."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (before, size - before - x.shape[axis])
    return jnp.pad(x, widths)


def _heads_first(x: jax.Array, size: int) -> jax.Array:
    """[B, T, N, H] -> [B, N, size, H], zero-padded along T."""
    return _pad_axis(jnp.swapaxes(x, 1, 2), 2, 0, size)


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
    words: jax.Array | None,
    *,
    dropatt: float,
    block: int | None = None,
    strided_roll: bool,
) -> jax.Array:
    """Softmax attention of one stream's query rows over [memory ; segment] keys.

    Args:
      q: [B, Q, N, H] projected query rows.
      k, v: [B, K, N, H] keys and values (K = M + L).
      k_r: [1 or B, K + L, N, H] projected relative encodings (per row with bi_data).
      biases: (r_w, r_r, r_s), [N, H] each.
      seg_embed: [2, N, H], same-segment and other-segment embeddings.
      row: int32 [B, Q, ROW_FIELDS] and key: int32 [B, KEY_FIELDS, K], see `masks`.
      positions: None for the content stream (Q = L, row i at position i: windowed
        positional term); int32 [B, Q] segment positions of the query stream's rows.
      words: uint32 [B, N] dropout words of (row, head) (`dropout.row_head_words`); None
        when dropatt is 0.
      dropatt: the attention dropout rate (static); entry (q, k) of row and head is dropped
        as `dropout.keep(words, q, k, dropatt)` says, q the row's index in this stream.
      block: rows and keys per tile; None: TPU_BLOCK.
      strided_roll: whether the target chip rotates lanes with a stride (TileSpec).

    Returns:
      [B, Q, N, H] attention output in q's dtype (before the output projection).
    """
    r_w, r_r, r_s = biases
    batch, num_rows, _, d_head = q.shape
    num_keys = k.shape[1]
    seg_len = k_r.shape[1] - num_keys
    b = block or TPU_BLOCK
    rows_p, keys_p = -(-num_rows // b) * b, -(-num_keys // b) * b
    qs = q + r_s
    seg = jnp.einsum("bqnh,snh->bnqs", qs, seg_embed, preferred_element_type=jnp.float32)
    qr = q + r_r
    if positions is None:
        front = max(0, rows_p - 1 - seg_len)
        front += -(front + seg_len + 1) % b  # aligns every window start to the block
        offset = front + seg_len + 1 - b
        pos_source = _pad_axis(jnp.swapaxes(k_r, 1, 2), 2, front, front + seg_len + 1 + keys_p)
        qr_in = _heads_first(qr, rows_p)
    else:
        offset, qr_in = None, None
        all_pos = jnp.einsum("bqnh,brnh->bnqr", qr, k_r, preferred_element_type=jnp.float32)
        pos_source = scores_by_key(all_pos, positions, num_keys)
        pos_source = _pad_axis(_pad_axis(pos_source, 2, 0, rows_p), 3, 0, keys_p)
    spec = tiles.TileSpec(b, d_head**-0.5, num_keys, offset, strided_roll, dropatt)
    if dropatt:
        words = words.reshape(*words.shape, 1, 1)
    out = _attend(
        spec,
        _heads_first(q + r_w, rows_p),
        qr_in,
        _pad_axis(seg, 2, 0, rows_p),
        _heads_first(k, keys_p),
        _heads_first(v, keys_p),
        pos_source,
        _pad_axis(row, 1, 0, rows_p),
        _pad_axis(key, 2, 0, keys_p),
        words if dropatt else None,
    )
    return jnp.swapaxes(out[:, :, :num_rows], 1, 2)
