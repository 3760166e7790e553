"""Fine-tuning through the attention kernel (interpret mode) against the XLA path.

The encoder's padding masks reach the kernel as O(B·L) vectors (masks.padding_order, and
key_info's per-key memory padding); the XLA path builds them dense, as the original's
classifier. A 2-layer classifier reads texts of 2 segments padded on the left (one shorter
than a segment, so its memory is all padding), with a memory of one segment: its logits and
gradients, with the gradient through the memory or not, must be the XLA path's to float32
rounding, and so must every position of the encoder (padded rows included, finite). The
tile is shrunk to 8 so that segment and memory span several tiles.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import TILES_OF_8
from xlnet_jax.config import ModelConfig
from xlnet_jax.finetune.features import pair_row
from xlnet_jax.finetune.forward import apply_segments
from xlnet_jax.model.encoder import XLNetEncoder
from xlnet_jax.model.heads import SequenceHead
from xlnet_jax.model.kernels import backends, masks
from xlnet_jax.model.kernels.gpu import attention as triton_attention
from xlnet_jax.model.kernels.tpu import attention as mosaic_attention

VOCAB, SEGMENTS, LENGTH = 40, 2, 16
XLA = ModelConfig(
    vocab_size=VOCAB, d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64,
    mem_len=LENGTH, dropout=0.0, dropatt=0.0, attention_impl="xla",
)  # fmt: skip
KERNEL = dataclasses.replace(XLA, attention_impl="pallas")
# Texts of 5 (the first segment all padding), 20 (partly) and 32 tokens (none): A <sep> <cls>.
TEXT_LENGTHS = (3, 18, 30)


@pytest.fixture(scope="module", autouse=True)
def tile_of_8():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mosaic_attention, "TPU_BLOCK", 8)
        patch.setattr(triton_attention, "GPU_TILES", TILES_OF_8)
        yield


@pytest.fixture(scope="module")
def texts() -> dict[str, jax.Array]:
    """[B, S, L] rows as features.pair_row makes them (padded on the left)."""
    rng = np.random.default_rng(0)
    rows = [pair_row(list(rng.integers(9, VOCAB, n)), None, LENGTH, SEGMENTS) for n in TEXT_LENGTHS]
    names = ("input_ids", "seg_ids", "input_mask")
    return {
        k: jnp.asarray(np.stack(v)) for k, v in zip(names, zip(*rows, strict=True), strict=True)
    }


@pytest.fixture(scope="module")
def params(texts):
    """Random classifier parameters at a scale where every layer moves the logits."""
    ids = texts["input_ids"][:, 0]
    memory = jnp.zeros((XLA.n_layer, ids.shape[0], LENGTH, XLA.d_model)), ids > 0
    init = jax.jit(SequenceHead(XLA, 3).init, static_argnames="deterministic")
    init = init(jax.random.key(0), ids, ids, ids < 0, *memory, deterministic=True)["params"]
    leaves, tree = jax.tree.flatten(init)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    noise = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, noise)


def max_rel_error(got, want) -> float:
    """max |got - want| / max |want| over the leaves of a pytree."""
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    return max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b))) for a, b in pairs)


@jax.jit
def _padding_masks(input_mask: jax.Array, mem_mask: jax.Array):
    """(padding_order's dense form, what row 0 of each text may not attend over the keys
    [memory ; segment] as the kernel's tile mask says)."""
    order = masks.padding_order(input_mask)
    seg_ids = jnp.zeros(input_mask.shape, jnp.int32)
    key = masks.key_info(order, seg_ids, mem_mask.shape[1], mem_mask)
    row = masks.row_info(order, seg_ids, jnp.zeros((input_mask.shape[0], 1), jnp.int32), True)
    fields = (masks.SELF_RANK, masks.ROW_BLOCK, masks.ROW_POSITION)
    key_fields = (masks.KEY_RANK, masks.KEY_BLOCK, masks.KEY_POSITION)
    hidden = masks.blocked(
        *(row[:, :, f, None] for f in fields), *(key[:, None, f] for f in key_fields)
    )
    return order.dense(), hidden


def test_padding_order_is_the_encoder_padding_mask():
    """Its dense form hides exactly the padded keys; a padded memory key is hidden too."""
    input_mask = jnp.asarray([[True, True, False, False], [False, False, False, False]])
    mem_mask = jnp.asarray([[True, False], [False, False]])
    dense, hidden = _padding_masks(input_mask, mem_mask)
    np.testing.assert_array_equal(dense, jnp.broadcast_to(input_mask[:, None], (2, 4, 4)))
    # Row 0 (a pad) sees itself, not the other pad nor the padded memory slot.
    want = jnp.asarray([[[True, False, False, True, False, False]], [[False] * 6]])
    np.testing.assert_array_equal(hidden, want)


@pytest.mark.parametrize("mem_gradient", [False, True])
def test_classifier_through_the_kernel_equals_xla(texts, params, mem_gradient):
    """Logits (1e-5) and every parameter's gradient (1e-4, relative to its largest entry)."""
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=(len(TEXT_LENGTHS), 3)))

    def run(config):
        def loss(p):
            logits = apply_segments(
                SequenceHead(config, 3), p, texts, deterministic=True, mem_gradient=mem_gradient
            )
            return jnp.sum(logits * cotangent), logits

        return jax.jit(jax.grad(loss, has_aux=True))(params)

    got_grads, got = run(KERNEL)
    want_grads, want = run(XLA)
    assert max_rel_error(got, want) < 1e-5
    for (path, g), w in zip(
        jax.tree.leaves_with_path(got_grads), jax.tree.leaves(want_grads), strict=True
    ):
        assert max_rel_error(g, w) < 1e-4, jax.tree_util.keystr(path)


@pytest.mark.parametrize("backend", ["mosaic", "triton"])
def test_every_encoder_position_equals_xla(texts, params, backend, monkeypatch):
    """The last segment over a partly padded memory: hidden states at every position, padded
    rows included (finite: each sees itself), and the next memory's padding marks."""
    monkeypatch.setattr(backends, "INTERPRETED", backend)
    batch = len(TEXT_LENGTHS)
    rng = np.random.default_rng(2)
    mems = jnp.asarray(rng.normal(size=(XLA.n_layer, batch, LENGTH, XLA.d_model)), jnp.float32)
    mem_mask = texts["input_mask"][:, 0]
    inputs = [texts[k][:, 1] for k in ("input_ids", "seg_ids", "input_mask")]

    def run(config):
        encoder = XLNetEncoder(config)
        return jax.jit(encoder.apply, static_argnames="deterministic")(
            {"params": params["transformer"]}, *inputs, mems, mem_mask, deterministic=True
        )

    (hidden, new_mems, new_mask), want = run(KERNEL), run(XLA)
    assert bool(jnp.all(jnp.isfinite(hidden)))
    assert bool(jnp.any(inputs[2])), "some rows of the last segment are padding"
    assert max_rel_error((hidden, new_mems), want[:2]) < 1e-5
    np.testing.assert_array_equal(new_mask, want[2])
