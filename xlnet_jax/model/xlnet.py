"""XLNet: a Transformer-XL encoder with two-stream attention and a tied LM head (Flax linen).

Batch-major throughout: B batch, L segment length, M memory length, P targets per row,
D model width. Layers run under `nn.scan` (parameters stacked on a leading 'layers' axis), so
compile time does not grow with depth.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.config import ModelConfig, view_problem
from xlnet_jax.model.attention import (
    KernelRows,
    QueryRows,
    RelativeBiases,
    TwoStreamRelativeAttention,
    logical_param,
    query_rows,
)
from xlnet_jax.model.kernels import masks
from xlnet_jax.model.kernels.mesh import NO_BF16_MATMUL, target_device
from xlnet_jax.model.position import default_backward_rows, relative_positional_encoding

# "gelu": the exact (erf) GELU, HF's "gelu"; "gelu_new": the original's modeling.gelu, the tanh
# approximation (HF's name for it, so export-hf and import-hf carry it unchanged).
ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}


def validate_model_config(cfg: ModelConfig) -> None:
    """Raises ValueError naming the first invalid field of `cfg`: its declared range
    (config/fields.py), then the relation between d_model and n_head."""
    problem = view_problem(cfg)
    if problem:
        raise ValueError(problem)
    if cfg.d_model % cfg.n_head:
        raise ValueError(f"d_model ({cfg.d_model}) must be divisible by n_head ({cfg.n_head})")


def uses_kernel(cfg: ModelConfig) -> bool:
    """Whether attention runs through the Pallas kernel: "pallas", or "auto" when the step is
    traced for an NVIDIA GPU (Triton kernel) or a TPU whose Mosaic compiles it in cfg.dtype,
    dropout or not; on a CPU the kernel would run interpreted, so "auto" keeps XLA there."""
    if cfg.attention_impl == "auto":
        device = target_device()
        bf16_fails = cfg.dtype == "bfloat16" and device.device_kind.startswith(NO_BF16_MATMUL)
        return device.platform == "gpu" or (device.platform == "tpu" and not bf16_fails)
    return cfg.attention_impl == "pallas"


def update_memory(
    mem: jax.Array, layer_input: jax.Array, reuse_len: int, mem_len: int
) -> jax.Array:
    """The next memory of one layer: concat(mem, input[:, :reuse_len])[:, -mem_len:], float32.

    reuse_len 0 keeps the whole segment (as HF); mem_len 0 gives an empty memory [B, 0, D].
    The gradient flows through it: the caller decides whether the memory is a constant
    (XLNetLM, carried across pretraining steps) or trained through (fine-tuning's segments of
    one text with mem_gradient, finetune/forward.py).
    """
    reused = layer_input if reuse_len == 0 else layer_input[:, :reuse_len]
    joined = jnp.concatenate([mem, reused.astype(jnp.float32)], axis=1)
    keep = min(mem_len, joined.shape[1])
    return joined[:, joined.shape[1] - keep :]


class TiedEmbedding(nn.Module):
    """The word embedding [vocab, D], also the output matrix of the LM head (tied, as XLNet)."""

    config: ModelConfig

    def setup(self):
        init = nn.initializers.normal(self.config.initializer_range)
        shape = (self.config.vocab_size, self.config.d_model)
        self.embedding = logical_param(self, "embedding", init, shape, ("vocab", "embed"))

    def __call__(self, ids: jax.Array) -> jax.Array:
        """ids int [B, L] -> float32 [B, L, D]."""
        # Gather the table over the FSDP axis before the lookup (whose output is batch-sharded
        # on it); otherwise the partitioner falls back to replicating the lookup's result.
        return jnp.take(nn.with_logical_constraint(self.embedding, ("vocab", None)), ids, axis=0)

    def attend(self, x: jax.Array) -> jax.Array:
        """x [B, P, D] -> float32 logits [B, P, vocab] (without the bias)."""
        return jnp.einsum("bpd,vd->bpv", x.astype(jnp.float32), self.embedding)


class FeedForward(nn.Module):
    """Position-wise feed-forward block with residual and post-LayerNorm."""

    config: ModelConfig
    deterministic: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [B, T, D] -> [B, T, D]."""
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        kernel_init = nn.initializers.normal(cfg.initializer_range)

        def dense(features: int, axes: tuple[str, str], name: str) -> nn.Dense:
            return nn.Dense(
                features,
                dtype=dtype,
                kernel_init=nn.with_logical_partitioning(kernel_init, axes),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
                name=name,
            )

        dropout = nn.Dropout(cfg.dropout)
        y = ACTIVATIONS[cfg.ff_activation](dense(cfg.d_inner, ("embed", "mlp"), "layer_1")(x))
        y = dropout(y, deterministic=self.deterministic)
        y = dense(cfg.d_model, ("mlp", "embed"), "layer_2")(y)
        y = dropout(y, deterministic=self.deterministic)
        return nn.LayerNorm(
            epsilon=cfg.layer_norm_eps,
            dtype=dtype,
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="layer_norm",
        )(y + x)


def _kernel_rows(order: masks.PermOrder, seg_ids, target_pos, mem_len):
    """KernelRows of the content stream (every position, sees itself) and of the query
    stream (the targets): O(B·L) vectors only."""
    key = masks.key_info(order, seg_ids, mem_len)
    positions = jnp.broadcast_to(jnp.arange(seg_ids.shape[1]), seg_ids.shape)
    content = KernelRows(None, masks.row_info(order, seg_ids, positions, True), key)
    query = KernelRows(target_pos, masks.row_info(order, seg_ids, target_pos, False), key)
    return content, query


def _stream_rows(perm_mask, seg_ids, target_pos, mem_len) -> tuple[QueryRows, QueryRows]:
    """The query rows of the content stream (every position, sees itself) and of the query
    stream (the targets, perm_mask rows as they are)."""
    batch, length = seg_ids.shape
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    content = query_rows(positions, perm_mask & ~jnp.eye(length, dtype=bool), seg_ids, mem_len)
    target_rows = jnp.take_along_axis(perm_mask, target_pos[:, :, None], axis=1)
    return content, query_rows(target_pos, target_rows, seg_ids, mem_len)


class XLNetLayer(nn.Module):
    """One layer of both streams: the body of the layer scan.

    Attributes:
      config: the model config.
      deterministic: disables dropout and dropatt.
    """

    config: ModelConfig
    deterministic: bool

    @nn.compact
    def __call__(self, carry, mem, pos_emb, content, query, shared_biases):
        """Runs one layer.

        Args:
          carry: (h [B, L, D], g [B, P, D] or None), the layer's content and query stream
            inputs; g None runs the content stream alone (the fine-tuning encoder).
          mem: float32 [B, M, D], this layer's memory (scanned over layers).
          pos_emb, content, query, shared_biases: as TwoStreamRelativeAttention (broadcast).

        Returns:
          ((h, g) of the next layer, this layer's new memory [B, mem_len', D]).
        """
        cfg = self.config
        h, g = carry
        mem = nn.with_logical_constraint(mem, ("batch", "mem_length", "embed"))
        new_mem = update_memory(mem, h, cfg.reuse_len, cfg.mem_len)
        h, g = TwoStreamRelativeAttention(cfg, self.deterministic, name="attention")(
            h, g, mem, pos_emb, content, query, shared_biases
        )
        ffn = FeedForward(cfg, self.deterministic, name="ffn")
        h = nn.with_logical_constraint(ffn(h), ("batch", "length", "embed"))
        if g is not None:
            g = nn.with_logical_constraint(ffn(g), ("batch", "targets", "embed"))
        return (h, g), new_mem


def layer_stack(cfg: ModelConfig, deterministic: bool) -> nn.Module:
    """The n_layer XLNetLayers under nn.scan, named "layers" (parameters stacked on a leading
    axis). Call inside a compact method: (h, g), mems [n_layer, B, M, D], pos_emb, content rows,
    query rows, shared biases -> ((h, g), new mems [n_layer, B, mem_len', D])."""
    layer_cls = nn.remat(XLNetLayer, prevent_cse=False) if cfg.remat else XLNetLayer
    return nn.scan(
        layer_cls,
        variable_axes={"params": 0},
        split_rngs={"params": True, "dropout": True},
        in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
        length=cfg.n_layer,
        unroll=min(cfg.scan_unroll, cfg.n_layer),
        metadata_params={nn.PARTITION_NAME: "layers"},
    )(cfg, deterministic, name="layers")


def _check_inputs(cfg: ModelConfig, input_ids, seg_ids, perm_mask, target_pos, mems, is_backward):
    """Raises ValueError naming the first argument whose shape does not fit."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {input_ids.shape}")
    batch, length = input_ids.shape
    if seg_ids.shape != (batch, length):
        raise ValueError(f"seg_ids must have shape {(batch, length)}, got {seg_ids.shape}")
    if isinstance(perm_mask, masks.PermOrder):
        for name, field in perm_mask._asdict().items():
            if field.shape != (batch, length):
                raise ValueError(f"perm_mask.{name} must have shape {(batch, length)}")
    elif perm_mask.shape != (batch, length, length):
        raise ValueError(
            f"perm_mask must have shape {(batch, length, length)}, got {perm_mask.shape}"
        )
    if target_pos.ndim != 2 or target_pos.shape[0] != batch:
        raise ValueError(f"target_pos must be [batch={batch}, num_predict], got {target_pos.shape}")
    if mems.ndim != 4 or mems.shape[0] != cfg.n_layer:
        raise ValueError(
            f"mems must be [n_layer={cfg.n_layer}, batch, mem, d_model], got {mems.shape}"
        )
    if mems.shape[1] != batch or mems.shape[3] != cfg.d_model:
        raise ValueError(
            f"mems must be [{cfg.n_layer}, {batch}, mem, {cfg.d_model}], got {mems.shape}"
        )
    if cfg.bi_data:
        if is_backward is None and batch % 2:
            raise ValueError(f"is_backward is None with bi_data needs an even batch, got {batch}")
        if is_backward is not None and is_backward.shape != (batch,):
            raise ValueError(f"is_backward must have shape {(batch,)}, got {is_backward.shape}")


class XLNetLM(nn.Module):
    """XLNet with its tied LM head, computing logits at the target positions only.

    The content stream runs over all L positions; the query stream (starting from `mask_emb`)
    only over the P target rows, through the same attention function (see
    TwoStreamRelativeAttention), so its cost is O(P * (M + L)) per layer.

    Attributes:
      config: the model config (validated on every call, before tracing).
    """

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        input_ids: jax.Array,
        seg_ids: jax.Array,
        perm_mask: jax.Array | masks.PermOrder,
        target_pos: jax.Array,
        mems: jax.Array,
        is_backward: jax.Array | None = None,
        *,
        deterministic: bool,
    ) -> tuple[jax.Array, jax.Array]:
        """Two-stream forward pass over one segment, with memory.

        Args:
          input_ids: int32 [B, L] tokens (the content stream sees the real tokens).
          seg_ids: int32 [B, L] token types (A=0, B=1, CLS=2); memory counts as type 0.
          perm_mask: bool [B, L, L], True where query i may NOT attend key j (query-stream
            semantics; the content stream also always sees itself); or the same as a
            masks.PermOrder of O(B·L) vectors. The kernel (uses_kernel) needs the PermOrder;
            a dense mask runs the XLA path whatever the config (init and the HF-convention
            entry points, whose params and results do not depend on the path).
          target_pos: int32 [B, P], positions of the P target rows (query stream).
          mems: float32 [n_layer, B, M, D] memory, always fully visible; M may be 0.
          is_backward: bool [B] or None; with config.bi_data, rows that use negated relative
            distances (None: the second half of the batch, as HF). Ignored without bi_data.
          deterministic: disables dropout and dropatt.

        Returns:
          logits: float32 [B, P, vocab] at the targets.
          new_mems: float32 [n_layer, B, mem_len', D], each layer's input appended to its
            memory: concat(mems, input[:, :reuse_len])[:, -mem_len:] (mem_len' = mem_len once
            enough has been seen; 0 when config.mem_len is 0); a constant to the gradient
            (stop_gradient), as the original's memory carried from one step to the next.
        """
        cfg = self.config
        validate_model_config(cfg)
        _check_inputs(cfg, input_ids, seg_ids, perm_mask, target_pos, mems, is_backward)
        dtype = jnp.dtype(cfg.dtype)
        batch, length = input_ids.shape
        mem_len = mems.shape[2]
        init = nn.initializers.normal(cfg.initializer_range)
        dropout = nn.Dropout(cfg.dropout)

        word_embedding = TiedEmbedding(cfg, name="word_embedding")
        mask_emb = logical_param(self, "mask_emb", init, (1, 1, cfg.d_model), (None, None, "embed"))
        lm_bias = logical_param(
            self, "lm_bias", nn.initializers.zeros, (cfg.vocab_size,), ("vocab",)
        )

        h = dropout(word_embedding(input_ids), deterministic=deterministic).astype(dtype)
        h = nn.with_logical_constraint(h, ("batch", "length", "embed"))
        g = jnp.broadcast_to(mask_emb, (batch, target_pos.shape[1], cfg.d_model))
        g = dropout(g, deterministic=deterministic).astype(dtype)
        g = nn.with_logical_constraint(g, ("batch", "targets", "embed"))

        if cfg.bi_data and is_backward is None:
            is_backward = default_backward_rows(batch)
        pos_emb = relative_positional_encoding(
            mem_len + length,
            length,
            cfg.d_model,
            cfg.clamp_len,
            is_backward if cfg.bi_data else None,
        )
        pos_emb = dropout(pos_emb, deterministic=deterministic).astype(dtype)

        if uses_kernel(cfg) and isinstance(perm_mask, masks.PermOrder):
            content, query = _kernel_rows(perm_mask, seg_ids, target_pos, mem_len)
        else:
            if isinstance(perm_mask, masks.PermOrder):
                perm_mask = perm_mask.dense()
            content, query = _stream_rows(perm_mask.astype(bool), seg_ids, target_pos, mem_len)
        shared_biases = None if cfg.untie_r else RelativeBiases(cfg, name="rel_biases")()
        mems = nn.with_logical_constraint(mems, ("layers", "batch", "mem_length", "embed"))
        layers = layer_stack(cfg, deterministic)
        (_, g), new_mems = layers((h, g), mems, pos_emb, content, query, shared_biases)

        g = dropout(g, deterministic=deterministic)
        logits = word_embedding.attend(g) + lm_bias
        logits = nn.with_logical_constraint(logits, ("batch", "targets", "vocab"))
        new_mems = jax.lax.stop_gradient(new_mems)
        return logits, nn.with_logical_constraint(
            new_mems, ("layers", "batch", "mem_length", "embed")
        )
