"""XLNetEncoder: the content stream alone, with padding masks and memory (fine-tuning).

Fine-tuning reads every position with full bidirectional attention: no factorization order,
no query stream. The encoder runs XLNetLM's own layers (`xlnet.layer_stack`, g None) and its
parameter tree is XLNetLM's without `mask_emb` and `lm_bias`, so a pretraining checkpoint or
an HF XLNet loads into it as it is.

Padding follows the original's classifier (and HF's `input_mask`): True marks a pad; a pad
key is hidden from every query but its own position (each row always sees itself, so a pad
row stays finite). Memory slots carry the same mark (`mem_mask`), so that a short document
read as several segments sees exactly what it would see read as one. With the attention
kernel (config.attention_impl, as pretraining) these masks are O(B·L) vectors
(kernels.masks.padding_order), so no [B, L, M + L] mask is built.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.attention import KernelRows, QueryRows, RelativeBiases, query_rows
from xlnet_jax.model.kernels import masks
from xlnet_jax.model.position import relative_positional_encoding
from xlnet_jax.model.xlnet import (
    TiedEmbedding,
    layer_stack,
    update_memory,
    uses_kernel,
    validate_model_config,
)


def update_mem_mask(
    mem_mask: jax.Array, input_mask: jax.Array, reuse_len: int, mem_len: int
) -> jax.Array:
    """The next memory's padding marks [B, mem_len'], by the rule of `update_memory`."""
    marks = update_memory(mem_mask[..., None], input_mask[..., None], reuse_len, mem_len)
    return marks[..., 0] > 0.5


def _check_inputs(cfg: ModelConfig, input_ids, seg_ids, input_mask, mems, mem_mask) -> None:
    """Raises ValueError naming the first argument whose shape does not fit."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {input_ids.shape}")
    batch, length = input_ids.shape
    for name, array in (("seg_ids", seg_ids), ("input_mask", input_mask)):
        if array.shape != (batch, length):
            raise ValueError(f"{name} must have shape {(batch, length)}, got {array.shape}")
    if mems.ndim != 4 or mems.shape[:2] != (cfg.n_layer, batch) or mems.shape[3] != cfg.d_model:
        raise ValueError(
            f"mems must be [{cfg.n_layer}, {batch}, mem, {cfg.d_model}], got {mems.shape}"
        )
    if mem_mask.shape != (batch, mems.shape[2]):
        raise ValueError(f"mem_mask must have shape {(batch, mems.shape[2])}, got {mem_mask.shape}")
    if cfg.bi_data:
        raise ValueError("bi_data is a pretraining setting: the encoder reads forward only")


def _content_rows(cfg: ModelConfig, seg_ids, input_mask, mem_mask) -> QueryRows | KernelRows:
    """The content stream's rows: a padded key (input_mask, mem_mask) is hidden from every
    row but its own position. KernelRows (O(B·L) vectors, masks.padding_order) when the
    attention kernel runs (xlnet.uses_kernel), else the XLA path's dense QueryRows."""
    batch, length = seg_ids.shape
    mem_len = mem_mask.shape[1]
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    if uses_kernel(cfg):
        order = masks.padding_order(input_mask)
        key = masks.key_info(order, seg_ids, mem_len, mem_mask)
        return KernelRows(None, masks.row_info(order, seg_ids, positions, True), key)
    pad_keys = input_mask[:, None, :] & ~jnp.eye(length, dtype=bool)
    rows = query_rows(positions, pad_keys, seg_ids, mem_len)
    mem_keys = jnp.broadcast_to(mem_mask[:, None, :], (batch, length, mem_len))
    return rows._replace(blocked=rows.blocked.at[:, :, :mem_len].set(mem_keys))


class XLNetEncoder(nn.Module):
    """XLNet's content stream over one segment with memory: hidden states for a task head.

    Attributes:
      config: the model config (validated on every call, before tracing). Its reuse_len
        decides which of the segment's positions enter the next memory (0: all, as HF).
    """

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        input_ids: jax.Array,
        seg_ids: jax.Array,
        input_mask: jax.Array,
        mems: jax.Array,
        mem_mask: jax.Array,
        *,
        deterministic: bool,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Forward pass of the content stream.

        Args:
          input_ids: int32 [B, L] tokens.
          seg_ids: int32 [B, L] token types; only equality matters (the original's classifier:
            A=0, B=1, CLS=2, PAD=4). Memory counts as type 0.
          input_mask: bool [B, L], True at padding (HF: 1 - attention_mask).
          mems: float32 [n_layer, B, M, D] memory; M may be 0.
          mem_mask: bool [B, M], True where a memory slot holds padding.
          deterministic: disables dropout and dropatt.

        Returns:
          hidden: float32 [B, L, D], the last layer's output (after dropout, as the original).
          new_mems: float32 [n_layer, B, mem_len', D] (see xlnet.update_memory), not cut
            from the gradient: a caller that carries them as a constant stops it itself.
          new_mem_mask: bool [B, mem_len'].
        """
        cfg = self.config
        validate_model_config(cfg)
        _check_inputs(cfg, input_ids, seg_ids, input_mask, mems, mem_mask)
        dtype = jnp.dtype(cfg.dtype)
        batch, length = input_ids.shape
        mem_len = mems.shape[2]
        dropout = nn.Dropout(cfg.dropout)

        h = dropout(TiedEmbedding(cfg, name="word_embedding")(input_ids), deterministic)
        h = nn.with_logical_constraint(h.astype(dtype), ("batch", "length", "embed"))
        pos_emb = relative_positional_encoding(
            mem_len + length, length, cfg.d_model, cfg.clamp_len, None
        )
        pos_emb = dropout(pos_emb, deterministic).astype(dtype)

        rows = _content_rows(cfg, seg_ids, input_mask.astype(bool), mem_mask.astype(bool))

        shared_biases = None if cfg.untie_r else RelativeBiases(cfg, name="rel_biases")()
        mems = nn.with_logical_constraint(mems, ("layers", "batch", "mem_length", "embed"))
        layers = layer_stack(cfg, deterministic)
        (h, _), new_mems = layers((h, None), mems, pos_emb, rows, None, shared_biases)
        hidden = dropout(h.astype(jnp.float32), deterministic)
        new_mem_mask = update_mem_mask(
            mem_mask.astype(jnp.float32), input_mask.astype(jnp.float32), cfg.reuse_len, cfg.mem_len
        )
        return hidden, new_mems, new_mem_mask
