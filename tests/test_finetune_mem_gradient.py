"""The two gradient paths of a text read as segments (finetune/forward.py, mem_gradient).

With mem_gradient the segments are one graph: a 1-layer model's last segment then gives the
logits and the gradients of one long pass over the whole text (its one layer attends every
earlier position's input, which is what the memory holds; with more layers the earlier
segments' states differ from a long pass's, which sees ahead). Without it, the gradient is
the last segment's with the memory as a constant input, as before the option existed. And
a run with segments and mem_gradient resumes from its checkpoint bit for bit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.config import ModelConfig
from xlnet_jax.finetune.compile import example_batch
from xlnet_jax.finetune.config import finetune_config
from xlnet_jax.finetune.forward import apply_segments
from xlnet_jax.finetune.program import build
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.model.heads import SequenceHead
from xlnet_jax.training.sharding import make_mesh

VOCAB, SEGMENTS, LENGTH, BATCH = 40, 3, 8, 2
TINY = dict(vocab_size=VOCAB, d_model=32, n_head=2, d_head=16, d_inner=64)


def _module(mem_len: int) -> SequenceHead:
    """A 1-layer classifier without dropout."""
    config = ModelConfig(**TINY, n_layer=1, mem_len=mem_len, dropout=0.0, dropatt=0.0)
    return SequenceHead(config, 2)


def _params(module: SequenceHead):
    """Random parameters at a scale where every layer moves the logits."""
    ids = jnp.zeros((BATCH, LENGTH), jnp.int32)
    empty = jnp.zeros((1, BATCH, 0, 32)), jnp.zeros((BATCH, 0), bool)
    params = module.init(jax.random.key(0), ids, ids, ids < 0, *empty, deterministic=True)
    leaves, tree = jax.tree.flatten(params["params"])
    keys = jax.random.split(jax.random.key(1), len(leaves))
    noise = [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, noise)


@pytest.fixture(scope="module")
def text() -> dict[str, np.ndarray]:
    """A batch of texts of SEGMENTS x LENGTH tokens, no padding: [B, S, L]."""
    ids = np.random.default_rng(0).integers(9, VOCAB, (BATCH, SEGMENTS, LENGTH)).astype(np.int32)
    return {"input_ids": ids, "seg_ids": np.zeros_like(ids), "input_mask": ids < 0}


def _loss_and_grads(module, params, inputs, mem_gradient: bool):
    def loss(p):
        logits = apply_segments(module, p, inputs, deterministic=True, mem_gradient=mem_gradient)
        return jnp.sum(jnp.sin(3.0 * logits)), logits

    (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return logits, grads


def _assert_trees_close(ours, reference, atol: float) -> None:
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)


def _largest_difference(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(jnp.abs(x - y).max()) for x, y in pairs)


@pytest.fixture(scope="module")
def one_layer(text):
    """(module, params, gradients without mem_gradient) of a 1-layer model with a memory
    of every earlier position."""
    module = _module(LENGTH * (SEGMENTS - 1))
    params = _params(module)
    return module, params, _loss_and_grads(module, params, text, False)[1]


def test_with_mem_gradient_segments_equal_one_long_pass(text, one_layer):
    """Logits and gradients of the segments equal one pass over S * L tokens (float32
    rounding: the gradients are O(1), their rounding ~1e-7)."""
    module, params, constant_memory = one_layer
    one_pass = {k: v.reshape(BATCH, 1, SEGMENTS * LENGTH) for k, v in text.items()}
    long_logits, long_grads = _loss_and_grads(_module(0), params, one_pass, False)
    logits, grads = _loss_and_grads(module, params, text, True)
    np.testing.assert_allclose(logits, long_logits, rtol=1e-5, atol=1e-6)
    _assert_trees_close(grads, long_grads, atol=1e-5)
    # The earlier tokens' embeddings get a gradient only through the memory.
    assert _largest_difference(constant_memory, long_grads) > 1e-3


def test_without_mem_gradient_the_memory_is_a_constant_input(text, one_layer):
    """The gradient without mem_gradient is the last segment's, its memory (made by the
    earlier segments) given as a constant input."""
    module, params, constant_memory = one_layer
    by_segment = [{k: jnp.asarray(v[:, s]) for k, v in text.items()} for s in range(SEGMENTS)]

    def last_segment(p, mems):
        last = by_segment[-1]
        logits, _, _ = module.apply(
            {"params": p}, last["input_ids"], last["seg_ids"], last["input_mask"], *mems,
            deterministic=True,
        )  # fmt: skip
        return jnp.sum(jnp.sin(3.0 * logits))

    @jax.jit
    def reference(p):
        mems = jnp.zeros((1, BATCH, 0, 32)), jnp.zeros((BATCH, 0), bool)
        for inputs in by_segment[:-1]:
            _, *mems = module.apply(
                {"params": p}, inputs["input_ids"], inputs["seg_ids"], inputs["input_mask"],
                *mems, deterministic=True,
            )  # fmt: skip
        return jax.grad(last_segment)(p, jax.lax.stop_gradient(mems))

    _assert_trees_close(constant_memory, reference(params), atol=1e-6)


def test_a_run_with_segments_and_mem_gradient_resumes_bit_exact(tmp_path):
    """Two train steps (dropout on, 2 segments, mem_gradient) straight, and the same with a
    checkpoint saved and restored between them: the same state bit for bit."""
    config = finetune_config()
    config.update(vocab_size=VOCAB, d_model=32, n_layer=1, n_head=2, d_head=16, d_inner=64)
    config.update(seq_len=8, batch_size=4, num_segments=2, mem_len=8, mem_gradient=True)
    config.update(clip_scope="global", learning_rate=1e-3, warmup_steps=0)
    task = get_task("classification")
    example = example_batch(task, config)
    ids = np.random.default_rng(3).integers(9, VOCAB, example["input_ids"].shape)
    labels = (np.arange(4) % 2).astype(np.int32)
    batch = {**example, "input_ids": ids.astype(np.int32), "label": labels}
    mesh = make_mesh(config, jax.devices()[:1])  # one device: the step compiles once, small
    program = build(config, task, ["a", "b"], mesh, example)
    with program.activate():
        placed = program.put_batch(batch)
        state = program.init_state()
        checkpointer = Checkpointer(str(tmp_path), config)
        state, _ = program.train_step(state, placed)
        checkpointer.save(state, make_meta(config, "test", 1))
        checkpointer.wait()
        straight, _ = program.train_step(state, placed)
        restored = checkpointer.restore(program.abstract_state, config, "test")
        checkpointer.close()
        assert int(restored.step) == 1
        resumed, _ = program.train_step(restored, placed)
    leaves = zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True)
    for a, b in leaves:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
