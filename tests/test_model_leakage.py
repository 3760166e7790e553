"""No target sees itself or a later target, through two layers, with memory and both streams.

The gradient of every target's logits (a random mix of them) w.r.t. each position's input
(word) embedding is taken by adding an offset to the embedding output with
`nn.intercept_methods`, so the model needs no test hook. Both attention paths: XLA with
the dense mask, the Pallas kernel (interpret mode; the Mosaic and the Triton kernel) with
the same mask as O(B·L) vectors, without and with attention dropout.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import TILES_OF_8
from xlnet_jax.checkpoint.hf import param_shapes
from xlnet_jax.config import ModelConfig
from xlnet_jax.model.kernels import backends
from xlnet_jax.model.kernels.gpu import attention as triton_attention
from xlnet_jax.model.kernels.masks import UNORDERED, PermOrder
from xlnet_jax.model.xlnet import TiedEmbedding, XLNetLM

BATCH, LENGTH, NUM_PREDICT, MEM = 2, 10, 4, 3


def _order(rng: np.random.Generator):
    """Random targets and factorization order per row: (rank [B, L], -1 = context; target_pos)."""
    rank = np.full((BATCH, LENGTH), -1)
    target_pos = np.stack([rng.choice(LENGTH, NUM_PREDICT, replace=False) for _ in range(BATCH)])
    for b in range(BATCH):
        rank[b, target_pos[b]] = rng.permutation(NUM_PREDICT)
    return rank, target_pos


@pytest.mark.parametrize(
    ("attention_impl", "dropatt"),
    [("xla", 0.0), ("pallas", 0.0), ("pallas", 0.1), ("pallas_triton", 0.1)],
)
def test_targets_see_neither_themselves_nor_later_targets(attention_impl, dropatt, monkeypatch):
    if attention_impl == "pallas_triton":  # the GPU kernel, interpreted on tiles of 8
        monkeypatch.setattr(backends, "INTERPRETED", "triton")
        monkeypatch.setattr(triton_attention, "GPU_TILES", TILES_OF_8)
        attention_impl = "pallas"
    config = ModelConfig(
        vocab_size=32,
        d_model=16,
        n_layer=2,
        n_head=2,
        d_head=8,
        d_inner=32,
        mem_len=4,
        dropout=0.0,
        dropatt=dropatt,
        attention_impl=attention_impl,
    )
    rng = np.random.default_rng(0)
    rank, target_pos = _order(rng)
    self_rank = np.maximum(rank, 0)
    perm_mask = (self_rank[:, :, None] <= rank[:, None, :]) & (rank[:, None, :] >= 0)
    if attention_impl == "pallas":
        key_rank = np.where(rank >= 0, rank, UNORDERED)
        perm_mask = PermOrder(*(jnp.asarray(x, jnp.int32) for x in (self_rank, key_rank, 0 * rank)))
    args = (
        jnp.asarray(rng.integers(0, config.vocab_size, (BATCH, LENGTH)), jnp.int32),
        jnp.asarray(np.repeat([[0] * 5 + [1] * 4 + [2]], BATCH, axis=0), jnp.int32),
        jax.tree.map(jnp.asarray, perm_mask),
        jnp.asarray(target_pos, jnp.int32),
    )
    mems = jnp.asarray(rng.normal(size=(config.n_layer, BATCH, MEM, config.d_model)), jnp.float32)
    params = jax.tree.map(
        lambda s: jnp.asarray(rng.normal(0.0, 0.3, s.shape), jnp.float32), param_shapes(config)
    )

    # A random mix of each target's logits: its gradient is zero exactly where every logit's
    # is (but for a measure-zero cancellation), at one backward pass per target, not per
    # vocabulary word.
    mix = jnp.asarray(rng.normal(size=(config.vocab_size,)), jnp.float32)

    def logits(offset, mems):
        """Each target's mixed logits [B, P] with `offset` [B, L, D] added to the word
        embeddings."""

        def add_offset(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            is_lookup = (
                isinstance(context.module, TiedEmbedding) and context.method_name == "__call__"
            )
            return out + offset if is_lookup else out

        with nn.intercept_methods(add_offset):
            out = XLNetLM(config).apply(
                {"params": params},
                *args,
                mems,
                deterministic=not dropatt,
                rngs={"dropout": jax.random.key(1)},
            )[0]
        return out @ mix

    offset = jnp.zeros((BATCH, LENGTH, config.d_model))
    d_emb, d_mems = jax.jit(jax.jacrev(logits, argnums=(0, 1)))(offset, mems)
    # Influence of input position j of row c on target p of row b: [B, P, B, L] (and memory).
    influence = np.abs(np.asarray(d_emb)).sum(axis=4)
    mem_influence = np.abs(np.asarray(d_mems)).sum(axis=(2, 5))  # [B, P, B, M]
    for b in range(BATCH):
        for p in range(NUM_PREDICT):
            t = target_pos[b, p]
            hidden = rank[b] >= rank[b, t]  # itself and every target later in the order
            assert hidden[t]
            assert (influence[b, p, b, hidden] == 0).all(), (b, p)
            assert (influence[b, p, b, ~hidden] > 0).all(), (b, p)
            assert (mem_influence[b, p, b] > 0).all(), (b, p)
            other = 1 - b
            assert (influence[b, p, other] == 0).all() and (mem_influence[b, p, other] == 0).all()
