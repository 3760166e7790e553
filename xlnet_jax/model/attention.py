"""Two-stream relative attention: XLNet's content and query streams share one attention function.

Shapes: B batch, L segment length, M memory length, K = M + L keys, Q query rows (L for the
content stream, P targets for the query stream), N heads, H head width, D model width.
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.kernels import dropout
from xlnet_jax.model.kernels.mesh import sharded_relative_attention
from xlnet_jax.model.position import scores_by_key

# Added to blocked scores before the softmax; exp() of it is exactly 0 in float32.
_BLOCKED = -1e30


def logical_param(module: nn.Module, name: str, init, shape: tuple[int, ...], axes: tuple):
    """A float32 parameter annotated with logical axis names (for sharding rules)."""
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.float32)


class QueryRows(NamedTuple):
    """What one stream's query rows need; computed once per forward pass, used by every layer."""

    positions: jax.Array  # int32 [B, Q]: position of each query row in the segment.
    blocked: jax.Array  # bool [B, Q, K]: True where the row may not attend the key.
    other_segment: jax.Array  # bool [B, Q, K]: True where the key lies in another segment.


def query_rows(
    positions: jax.Array, blocked_in_segment: jax.Array, seg_ids: jax.Array, mem_len: int
) -> QueryRows:
    """Extends per-row segment masks over [memory ; segment] keys.

    Args:
      positions: int32 [B, Q], the segment positions of the query rows.
      blocked_in_segment: bool [B, Q, L], True where the row may not attend a segment key.
      seg_ids: int32 [B, L] token types. Memory keys count as type 0.
      mem_len: M, the number of memory keys (always visible).

    Returns:
      The QueryRows of these rows.
    """
    batch, num_rows = positions.shape
    key_seg = jnp.concatenate([jnp.zeros((batch, mem_len), seg_ids.dtype), seg_ids], axis=1)
    row_seg = jnp.take_along_axis(seg_ids, positions, axis=1)
    visible_mem = jnp.zeros((batch, num_rows, mem_len), bool)
    return QueryRows(
        positions=positions,
        blocked=jnp.concatenate([visible_mem, blocked_in_segment], axis=2),
        other_segment=row_seg[:, :, None] != key_seg[:, None, :],
    )


class KernelRows(NamedTuple):
    """What one stream's query rows need on the Pallas path: O(B·L) vectors, no [B, Q, K] mask."""

    positions: jax.Array | None  # int32 [B, P] for the query stream; None: content (arange(L)).
    row: jax.Array  # int32 [B, Q, ROW_FIELDS] (kernels.masks.row_info).
    key: jax.Array  # int32 [B, KEY_FIELDS, K] (kernels.masks.key_info).


class RelativeBiases(nn.Module):
    """The r_w (content), r_r (position) and r_s (segment) query biases, [N, H] each."""

    config: ModelConfig

    @nn.compact
    def __call__(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        cfg = self.config
        init = nn.initializers.normal(cfg.initializer_range)
        shape, axes = (cfg.n_head, cfg.d_head), ("heads", "kv")
        return tuple(
            logical_param(self, n, init, shape, axes) for n in ("r_w_bias", "r_r_bias", "r_s_bias")
        )


class TwoStreamRelativeAttention(nn.Module):
    """Relative multi-head attention of both streams, then projection, residual and LayerNorm.

    Keys and values come from the content stream [memory ; h] and are projected once; both
    streams then run the same `attend` with their own query rows, so every weight (q, k, v, o,
    r, biases, seg_embed, LayerNorm) is shared. A query row is identified by its segment
    position t: its positional scores are computed against all K + L relative encodings and
    the window from entry L - t is kept for the keys (position.scores_by_key; what
    Transformer-XL's rel_shift does for a full square of rows). The content stream passes
    positions arange(L); the query stream passes the P target positions, so its cost is
    O(P * K), never O(L * K).

    Rows given as KernelRows run through the Pallas kernel (kernels.backends)
    instead, which computes the same scores tile by tile. Both paths drop the same attention
    probabilities: each stream draws one word per (row, head) from the layer's dropout rng,
    and `kernels.dropout.keep` decides entry (q, k) from it (q: the row's index in the stream,
    k: the key's in [memory ; segment]).

    Attributes:
      config: the model config.
      deterministic: disables dropout and dropatt.
    """

    config: ModelConfig
    deterministic: bool

    @nn.compact
    def __call__(
        self,
        h: jax.Array,
        g: jax.Array | None,
        mem: jax.Array,
        pos_emb: jax.Array,
        content: QueryRows | KernelRows,
        query: QueryRows | KernelRows | None,
        shared_biases: tuple[jax.Array, jax.Array, jax.Array] | None,
    ) -> tuple[jax.Array, jax.Array | None]:
        """Runs one layer's attention for both streams.

        Args:
          h: [B, L, D] content stream (the layer input).
          g: [B, P, D] query stream at the targets, or None: the content stream alone (the
            fine-tuning encoder).
          mem: [B, M, D] memory of this layer (prepended to the keys, always visible).
          pos_emb: [1 or B, K + L, D] relative encodings (per row when bi_data).
          content: QueryRows (XLA) or KernelRows (Pallas) of the content stream (positions
            arange(L)).
          query: the same for the query stream (positions = targets); None with g None.
          shared_biases: (r_w, r_r, r_s) shared by all layers, or None to own them (untie_r).

        Returns:
          (h, g) after attention, residual and LayerNorm: [B, L, D] and [B, P, D] (None when
          g is None).
        """
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        init = nn.initializers.normal(cfg.initializer_range)
        kernel_shape, kernel_axes = (cfg.d_model, cfg.n_head, cfg.d_head), ("embed", "heads", "kv")
        w_q, w_k, w_v, w_o, w_r = (
            logical_param(self, name, init, kernel_shape, kernel_axes).astype(dtype)
            for name in ("q", "k", "v", "o", "r")
        )
        seg_embed = logical_param(
            self, "seg_embed", init, (2, cfg.n_head, cfg.d_head), (None, "heads", "kv")
        ).astype(dtype)
        if shared_biases is None:
            shared_biases = RelativeBiases(cfg, name="rel_biases")()
        r_w_bias, r_r_bias, r_s_bias = (b.astype(dtype) for b in shared_biases)
        layer_norm = nn.LayerNorm(
            epsilon=cfg.layer_norm_eps,
            dtype=dtype,
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="layer_norm",
        )
        dropatt = 0.0 if self.deterministic else cfg.dropatt
        hidden_dropout = nn.Dropout(cfg.dropout)
        head_axes = ("batch", "length", "heads", "kv")  # keys span memory and segment

        keys_in = jnp.concatenate([mem.astype(dtype), h], axis=1)
        k = nn.with_logical_constraint(jnp.einsum("bkd,dnh->bknh", keys_in, w_k), head_axes)
        v = nn.with_logical_constraint(jnp.einsum("bkd,dnh->bknh", keys_in, w_v), head_axes)
        k_r = jnp.einsum("brd,dnh->brnh", pos_emb, w_r)
        num_keys = k.shape[1]
        if dropatt and num_keys > dropout.MAX_INDEX:
            raise ValueError(
                f"dropatt > 0 numbers at most {dropout.MAX_INDEX} keys (memory + segment), "
                f"got {num_keys}; set dropatt=0 or shorten mem_len / seq_len"
            )

        def attend(x: jax.Array, rows: QueryRows | KernelRows, rows_axis: str) -> jax.Array:
            """Attention of the query rows x [B, Q, D] over all keys; returns [B, Q, D]."""
            q = jnp.einsum("bqd,dnh->bqnh", x, w_q)
            q = nn.with_logical_constraint(q, ("batch", rows_axis, "heads", "kv"))
            words = None
            if dropatt:
                words = dropout.row_head_words(self.make_rng("dropout"), q.shape[0], cfg.n_head)
                words = nn.with_logical_constraint(words, ("batch", "heads"))
            if isinstance(rows, KernelRows):
                biases = (r_w_bias, r_r_bias, r_s_bias)
                out = sharded_relative_attention(
                    q, k, v, k_r, biases, seg_embed, rows.row, rows.key, rows.positions, words,
                    dropatt=dropatt,
                )  # fmt: skip
                return finish(out, x)
            f32 = jnp.float32
            content_score = jnp.einsum(
                "bqnh,bknh->bnqk", q + r_w_bias, k, preferred_element_type=f32
            )
            all_pos_score = jnp.einsum(
                "bqnh,brnh->bnqr", q + r_r_bias, k_r, preferred_element_type=f32
            )
            pos_score = scores_by_key(all_pos_score, rows.positions, num_keys)
            seg_score = jnp.einsum(
                "bqnh,snh->bnqs", q + r_s_bias, seg_embed, preferred_element_type=f32
            )
            seg_score = jnp.where(
                rows.other_segment[:, None], seg_score[..., 1:], seg_score[..., :1]
            )
            score = (content_score + pos_score + seg_score) * (cfg.d_head**-0.5)
            score = jnp.where(rows.blocked[:, None], _BLOCKED, score)
            prob = jax.nn.softmax(score, axis=-1)
            if dropatt:
                kept = dropout.dense_keep(words, *prob.shape[2:], dropatt)
                prob = jnp.where(kept, prob * jnp.float32(1 / (1 - dropatt)), 0.0)
            return finish(jnp.einsum("bnqk,bknh->bqnh", prob.astype(dtype), v), x)

        def finish(out: jax.Array, x: jax.Array) -> jax.Array:
            """Output projection of the heads [B, Q, N, H], dropout, residual, LayerNorm."""
            out = jnp.einsum("bqnh,dnh->bqd", out, w_o)
            out = hidden_dropout(out, deterministic=self.deterministic)
            return layer_norm(out + x)

        return attend(h, content, "length"), None if g is None else attend(g, query, "targets")
