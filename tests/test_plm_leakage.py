"""End to end with the model: a PLM sample's masks let no information leak.

The per-position input embeddings are perturbed through a Flax method interceptor on the
word-embedding lookup (`TiedEmbedding.__call__`); the tied output projection (`attend`) is left
alone, so gradients w.r.t. the perturbation are exactly the gradients w.r.t. each
position's input embedding.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.xlnet import TiedEmbedding, XLNetLM
from xlnet_jax.objective import plm

PLM = plm.PLMConfig(
    seq_len=32, reuse_len=16, num_predict=6, perm_size=8, mask_alpha=2, mask_beta=1, max_span=3
)
MODEL = ModelConfig(
    vocab_size=64,
    d_model=32,
    n_layer=3,
    n_head=2,
    d_head=16,
    d_inner=64,
    dropout=0.0,
    dropatt=0.0,
    reuse_len=16,
    mem_len=16,
)
BATCH = 2


def make_batch(seed):
    """Rows reuse(16) + A <sep> B <sep> <cls> with their segment ids, and a PLM sample."""
    rng = np.random.default_rng(seed)
    L, R = PLM.seq_len, PLM.reuse_len
    ids = rng.integers(10, MODEL.vocab_size, (BATCH, L)).astype(np.int32)
    ws = rng.random((BATCH, L)) < 0.6
    func = np.zeros((BATCH, L), bool)
    seg = np.zeros((BATCH, L), np.int32)
    for b in range(BATCH):
        sep_a = R + rng.integers(1, L - R - 3)
        func[b, [sep_a, L - 2, L - 1]] = True
        ids[b, [sep_a, L - 2, L - 1]] = [4, 4, 3]  # <sep> <sep> <cls>
        seg[b, sep_a + 1 : L - 1] = 1
        seg[b, L - 1] = 2
    backward = np.arange(BATCH) % 2 == 1
    sample = plm.sample_plm(jax.random.key(seed), ids, ws | func, func, backward, PLM)
    mask = plm.perm_mask(sample, func, PLM.reuse_len)
    return ids, seg, jax.device_get(sample), np.asarray(mask)


def embed_with_offset(offset):
    """Interceptor adding `offset` [B, L, D] to the word-embedding lookup only."""

    def interceptor(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if isinstance(context.module, TiedEmbedding) and context.method_name == "__call__":
            out = out + offset
        return out

    return interceptor


@pytest.fixture(scope="module")
def setup():
    model = XLNetLM(MODEL)
    ids, seg, sample, mask = make_batch(0)
    mems = jax.random.normal(jax.random.key(1), (MODEL.n_layer, BATCH, MODEL.mem_len, 32))
    init = jax.jit(
        lambda key: model.init(key, ids, seg, mask, sample.target_pos, mems, deterministic=True)
    )
    params = init(jax.random.key(2))

    def forward(offset, ids=ids):
        with nn.intercept_methods(embed_with_offset(offset)):
            return model.apply(params, ids, seg, mask, sample.target_pos, mems, deterministic=True)

    return forward, ids, sample


def test_targets_see_nothing_at_or_after_their_rank(setup):
    forward, _, sample = setup
    labels = jnp.asarray(sample.target_ids)

    def target_losses(offset):
        logits, _ = forward(offset)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]  # [B, P]

    offset = jnp.zeros((BATCH, PLM.seq_len, MODEL.d_model))
    jac = jax.jit(jax.jacrev(target_losses))(offset)  # [B, P, B, L, D]
    grad_norm = np.asarray(jnp.linalg.norm(jac, axis=-1))  # [B, P, B, L]
    checked = 0
    for b in range(BATCH):
        ordered = sample.is_target[b] | (sample.ranks[b] >= 0)
        for t in np.flatnonzero(sample.target_weights[b]):
            pos = sample.target_pos[b, t]
            # Hidden from this target, by the objective's definition (not read off the
            # mask): its own token and everything ordered at or after it; for a target in
            # the reuse block, the whole new block too.
            hidden = ordered & (sample.ranks[b] >= sample.ranks[b, pos])
            if pos < PLM.reuse_len:
                hidden |= np.arange(PLM.seq_len) >= PLM.reuse_len
            assert hidden[pos]
            # Exactly zero through every layer; everything else has an effect.
            np.testing.assert_array_equal(grad_norm[b, t, b][hidden], 0.0)
            assert np.all(grad_norm[b, t, b][~hidden] > 0), "a visible token has no effect"
            other_rows = np.arange(BATCH) != b
            np.testing.assert_array_equal(grad_norm[b, t][other_rows], 0.0)
            checked += 1
    assert checked == BATCH * PLM.num_predict


def test_reuse_block_never_sees_the_new_block(setup):
    # new_mems are the layers' inputs over the reuse block (stop-gradient, so compare
    # values): an arbitrary change to the new block's embeddings and tokens leaves them
    # bit-identical, while a change to the reuse block moves every layer's memory.
    forward, ids, _ = setup
    R = PLM.reuse_len
    noise = 3.0 * jax.random.normal(jax.random.key(3), (BATCH, PLM.seq_len, MODEL.d_model))
    in_new = (jnp.arange(PLM.seq_len) >= R)[None, :, None]
    other_ids = ids.copy()
    other_ids[:, R:] = (ids[:, R:] + 7) % MODEL.vocab_size
    run = jax.jit(lambda offset, ids: forward(offset, ids)[1])
    base = np.asarray(run(jnp.zeros_like(noise), ids))
    changed_new = np.asarray(run(jnp.where(in_new, noise, 0.0), other_ids))
    np.testing.assert_array_equal(changed_new, base)
    changed_reuse = np.asarray(run(jnp.where(in_new, 0.0, noise), ids))
    for layer in range(MODEL.n_layer):
        assert not np.allclose(changed_reuse[layer, :, -R:], base[layer, :, -R:])
