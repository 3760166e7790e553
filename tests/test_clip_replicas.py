"""config.clip_replicas: the original's TPU update (CrossShardOptimizer, reduction MEAN, the
per-core clip of model_utils.get_train_op, n cores) on any number of devices.

The reference is numpy: each core's gradient of its rows' mean loss (autodiff of the task's
loss on that core's rows alone, one at a time, no vmap), divided by n (MEAN), clipped by
global norm as tf.clip_by_global_norm, summed over the cores, then one step of TF's
AdamOptimizer (weight_decay 0). Ours is the jitted train step of the program, on 1 device
and on 8 simulated devices, with n = 8 either way. Dropout is off so the per-core dropout
keys do not enter; tolerances are float32 rounding of the gradient sums.
"""

import importlib.util

import jax
import numpy as np
import pytest

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.errors import ConfigError
from xlnet_jax.finetune import program as finetune_program
from xlnet_jax.finetune.compile import example_batch
from xlnet_jax.finetune.config import finetune_config, validate
from xlnet_jax.finetune.program import build
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.training.sharding import make_mesh

CORES, BATCH, TOKENS = 8, 16, 16


def _config(**overrides):
    c = finetune_config()
    c.vocab_size, c.d_model, c.n_layer, c.n_head, c.d_head, c.d_inner = 64, 32, 2, 2, 16, 64
    c.seq_len, c.batch_size, c.dropout, c.dropatt = TOKENS, BATCH, 0.0, 0.0
    c.learning_rate, c.warmup_steps, c.num_train_steps = 1e-2, 0, 10
    c.weight_decay, c.lr_layer_decay_rate = 0.0, 1.0
    # A clip under most cores' gradient norms (so they clip) and an epsilon above the
    # update's entries (so Adam's first step follows the gradient's values, not its signs).
    c.clip_norm, c.adam_eps = 0.02, 1e-2
    c.clip_scope, c.clip_replicas = "replica", CORES
    c.update(overrides)
    return c


def _batch(config) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    batch = example_batch(get_task("classification"), config)
    batch["input_ids"] = rng.integers(10, config.vocab_size, batch["input_ids"].shape)
    batch["input_ids"] = batch["input_ids"].astype(np.int32)
    batch["seg_ids"][..., TOKENS // 2 :] = 1
    batch["label"] = rng.integers(0, 2, BATCH).astype(np.int32)
    batch["weight"][3] = 0.0  # a padded row: core 1's mean is over its one real row
    return batch


@pytest.fixture(scope="module")
def case():
    """(config, batch, host params, the program on one device)."""
    config = _config()
    batch = _batch(config)
    program = build(config, get_task("classification"), ["a", "b"],
                    make_mesh(config, jax.devices()[:1]), batch)  # fmt: skip
    rng = np.random.default_rng(1)
    params = jax.tree.map(
        lambda a: rng.normal(0, 0.2, a.shape).astype(np.float32), program.abstract_state.params
    )
    return config, batch, params, program


def _core_gradients(program, params, batch, cores: int = CORES) -> list[list[np.ndarray]]:
    """Each core's gradient of its own rows' weighted mean loss, as float64 leaves."""

    def loss(p, rows):
        return finetune_program._loss(program.task, program.module, p, rows, deterministic=True)[0]

    grad = jax.jit(jax.grad(loss))
    share = BATCH // cores
    out = []
    for r in range(cores):
        rows = {k: v[r * share : (r + 1) * share] for k, v in batch.items()}
        out.append([np.asarray(g, np.float64) for g in jax.tree.leaves(grad(params, rows))])
    return out


def _reference_update(params, core_grads, config, per_core: bool) -> list[np.ndarray]:
    """The original's step in numpy: MEAN over the cores (each gradient / n), the clip per
    core (per_core) or once on the sum, then TF's AdamOptimizer at t = 1."""
    n, c = len(core_grads), config.clip_norm

    def clip(leaves):  # tf.clip_by_global_norm
        norm = np.sqrt(sum((g**2).sum() for g in leaves))
        return [g * c / max(norm, c) for g in leaves]

    scaled = [[g / n for g in leaves] for leaves in core_grads]
    if per_core:
        clipped = [clip(leaves) for leaves in scaled]
        grads = [sum(core[i] for core in clipped) for i in range(len(scaled[0]))]
    else:
        grads = clip([sum(core[i] for core in scaled) for i in range(len(scaled[0]))])
    b1, b2, eps, lr = config.adam_b1, config.adam_b2, config.adam_eps, config.learning_rate
    out = []
    for p, g in zip(jax.tree.leaves(params), grads, strict=True):
        m, v = (1 - b1) * g, (1 - b2) * g * g
        step = lr * np.sqrt(1 - b2) / (1 - b1)
        out.append(np.asarray(p, np.float64) - step * m / (np.sqrt(v) + eps))
    return out


def _ours(config, batch, params, num_devices: int) -> list[np.ndarray]:
    mesh = make_mesh(config, jax.devices()[:num_devices])
    program = build(config, get_task("classification"), ["a", "b"], mesh, batch)
    with program.activate():
        state = TrainState(
            step=np.int32(0), params=params, opt_state=program.tx.init(params),
            mems=np.zeros((1,), np.float32),
            rng=jax.random.key_data(jax.random.PRNGKey(0)), skipped_steps=np.int32(0),
        )  # fmt: skip
        state = jax.device_put(state, jax.tree.map(lambda a: a.sharding, program.abstract_state))
        state, _ = program.train_step(state, program.put_batch(batch))
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(state.params))]


def _close(got, want, initial, largest):
    """The updates equal to float32 rounding: of the gradient sums (1e-4 of the largest
    update) and of the params they are read from (a few float32 spacings of |param|)."""
    spacing = np.spacing(np.abs(initial).astype(np.float32)).astype(np.float64)
    tolerance = 1e-4 * largest + 4 * spacing
    assert np.all(np.abs((got - initial) - (want - initial)) <= tolerance)


@pytest.fixture(scope="module")
def reference(case):
    config, batch, params, program = case
    core_grads = _core_gradients(program, params, batch)
    norms = [np.sqrt(sum((g**2).sum() for g in leaves)) / CORES for leaves in core_grads]
    assert sum(n > config.clip_norm for n in norms) >= CORES // 2  # the clip acts on most
    return (
        _reference_update(params, core_grads, config, per_core=True),
        _reference_update(params, core_grads, config, per_core=False),
    )


@pytest.mark.parametrize("num_devices", [1, 8])
def test_the_update_is_the_originals_tpu_update_on_any_device_count(case, reference, num_devices):
    config, batch, params, _ = case
    assert jax.device_count() >= num_devices
    want, global_clip = reference
    got = _ours(config, batch, params, num_devices)
    initial = [np.asarray(p, np.float64) for p in jax.tree.leaves(params)]
    largest = max(np.abs(w - p).max() for w, p in zip(want, initial, strict=True))
    assert largest > 1e-4  # the step moved the params
    # the per-core clip is another update than one clip of the sum: the test tells them apart
    assert max(np.abs(w - g).max() for w, g in zip(want, global_clip, strict=True)) > 0.1 * largest
    for g, w, p in zip(got, want, initial, strict=True):
        _close(g, w, p, largest)


def test_a_count_that_does_not_spread_over_the_devices_is_the_same_update(case):
    """4 cores on 8 devices: the shares (4 rows each) do not lie one to a device, nor split
    over the 8; the step still equals the 4-core reference."""
    config, batch, params, program = case
    config = _config(clip_replicas=4)
    want = _reference_update(params, _core_gradients(program, params, batch, 4), config, True)
    got = _ours(config, batch, params, 8)
    initial = [np.asarray(p, np.float64) for p in jax.tree.leaves(params)]
    largest = max(np.abs(w - p).max() for w, p in zip(want, initial, strict=True))
    assert largest > 1e-6  # the step moved the params
    for g, w, p in zip(got, want, initial, strict=True):
        _close(g, w, p, largest)


def test_a_count_that_does_not_divide_the_micro_batch_is_one_line():
    with pytest.raises(ConfigError) as error:
        validate(_config(clip_replicas=3))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("config.clip_replicas: 3 does not divide a micro-batch's 16 rows")


def _preset(name: str):
    spec = importlib.util.spec_from_file_location(name, f"configs/finetune/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def test_the_presets_clip_over_the_originals_core_counts():
    counts = {name: _preset(name).clip_replicas for name in ("squad_large", "race", "squad_base")}
    assert counts == {"squad_large": 8, "race": 32, "squad_base": 1}
    assert finetune_config().clip_replicas == 0  # no preset: the mesh's devices, as before
