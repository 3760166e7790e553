"""config.pretrain_clip_replicas: pretraining's update as the original TPU train.py makes it
over n cores (CrossShardOptimizer, reduction MEAN, model_utils.get_train_op's clip per core,
AdamWeightDecayOptimizer), on any number of devices.

The reference is numpy: each core's gradient of its rows' mean PLM loss over their own
targets (autodiff of the model's forward on that core's rows alone, one core at a time, no
vmap), with those rows' memory and the PLM sample the step draws for the whole batch (its
rows of it), divided by n (MEAN), clipped by global norm as tf.clip_by_global_norm, summed
over the cores, then one step of AdamWeightDecayOptimizer (no bias correction, decay on all
but LayerNorm and biases, the r_*_bias decayed). Ours is the jitted train step of the
program (the one tests/test_clip_replicas.py holds for fine-tuning: training/replicas.py),
on 1 device and on 8 simulated devices, with n = 8 either way. Dropout is off so the
per-core dropout keys do not enter; tolerances are float32 rounding of the gradient sums.
"""

import jax
import numpy as np
import pytest

from tests.helpers import synthetic_batch
from tests.train_config import small_config
from xlnet_jax.config import default_config
from xlnet_jax.errors import ConfigError
from xlnet_jax.training import sharding, steps
from xlnet_jax.training.program import build_program

CORES, BATCH = 8, 16
DECAYED_BIASES = ("r_w_bias", "r_r_bias", "r_s_bias")


def _config(**overrides):
    c = small_config(batch_size=BATCH, dropout=0.0, dropatt=0.0)
    c.learning_rate, c.warmup_steps, c.num_train_steps, c.weight_decay = 1e-2, 0, 10, 0.01
    # A clip under most cores' gradient norms (so they clip) and an epsilon above the
    # update's entries (so Adam's first step follows the gradient's values, not its signs).
    c.clip_norm, c.adam_eps = 0.05, 1e-2
    c.pretrain_adam_variant, c.pretrain_clip_replicas = "original", CORES
    c.update(overrides)
    return c


@pytest.fixture(scope="module")
def case():
    """(config, batch, host params, host memory, the state's rng, the 1-device program)."""
    config = _config()
    program = build_program(config, sharding.make_mesh(config, jax.devices()[:1]))
    rng = np.random.default_rng(1)
    params = jax.tree.map(
        lambda a: rng.normal(0, 0.2, a.shape).astype(np.float32), program.abstract_state.params
    )
    mems = rng.normal(0, 1.0, program.abstract_state.mems.shape).astype(np.float32)
    with program.activate():
        rng_data = np.asarray(jax.device_get(program.init_state().rng))
    return config, synthetic_batch(config, 0), params, mems, rng_data, program


def _core_gradients(case, cores: int = CORES):
    """Each core's gradient of its own rows' mean loss (float64 leaves), and its rows' new
    memory, one core at a time."""
    config, batch, params, mems, rng_data, program = case
    with program.activate():
        sample = steps.sample_targets(batch, steps.step_keys(rng_data, 0)[0], config)

        def loss(p, rows, core_sample, core_mems):
            terms, new_mems = steps.forward(
                program.model, p, rows, core_sample, core_mems, None, config.reuse_len,
                deterministic=True,
            )  # fmt: skip
            return terms[0] / terms[1], new_mems

        grad = jax.jit(jax.grad(loss, has_aux=True))
        share = BATCH // cores
        grads, new_mems = [], []
        for r in range(cores):
            part = slice(r * share, (r + 1) * share)
            rows = {k: v[part] for k, v in batch.items()}
            core_sample = jax.tree.map(lambda x, part=part: x[part], sample)
            g, m = grad(params, rows, core_sample, mems[:, part])
            grads.append([np.asarray(x, np.float64) for x in jax.tree.leaves(g)])
            new_mems.append(np.asarray(m))
    return grads, np.concatenate(new_mems, axis=1)


def _decays(path) -> bool:
    name = str(path[-1].key)
    return name in DECAYED_BIASES or (name != "scale" and "bias" not in name)


def _reference_update(params, core_grads, config, per_core: bool) -> list[np.ndarray]:
    """The original's step in numpy: MEAN over the cores (each gradient / n), the clip per
    core (per_core) or once on the sum, then AdamWeightDecayOptimizer at t = 1."""
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
    leaves = jax.tree_util.tree_leaves_with_path(params)
    for (path, p), g in zip(leaves, grads, strict=True):
        p = np.asarray(p, np.float64)
        m, v = (1 - b1) * g, (1 - b2) * g * g
        decay = config.weight_decay * p if _decays(path) else 0.0
        out.append(p - lr * (m / (np.sqrt(v) + eps) + decay))
    return out


def _ours(config, params, mems, batch, num_devices: int):
    """(params, memory, metrics) after one train step of the program on `num_devices`."""
    program = build_program(config, sharding.make_mesh(config, jax.devices()[:num_devices]))
    with program.activate():
        state = program.init_state()
        state = state.replace(
            params=jax.device_put(params, program.state_shardings.params),
            mems=jax.device_put(mems, program.state_shardings.mems),
        )
        state, metrics = program.train_step(state, program.put_batch(batch))
    params, mems = jax.device_get((state.params, state.mems))
    return [np.asarray(x) for x in jax.tree.leaves(params)], np.asarray(mems), metrics


def _close(got, want, initial, largest):
    """The updates equal to float32 rounding: of the gradient sums (1e-4 of the largest
    update) and of the params they are read from (a few float32 spacings of |param|)."""
    spacing = np.spacing(np.abs(initial).astype(np.float32)).astype(np.float64)
    tolerance = 1e-4 * largest + 4 * spacing
    assert np.all(np.abs((got - initial) - (want - initial)) <= tolerance)


@pytest.fixture(scope="module")
def reference(case):
    config, _, params, *_ = case
    core_grads, new_mems = _core_gradients(case)
    norms = [np.sqrt(sum((g**2).sum() for g in leaves)) / CORES for leaves in core_grads]
    assert sum(n > config.clip_norm for n in norms) >= CORES // 2  # the clip acts on most
    return (
        _reference_update(params, core_grads, config, per_core=True),
        _reference_update(params, core_grads, config, per_core=False),
        new_mems,
    )


@pytest.mark.parametrize(("num_devices", "micro_batches"), [(1, 1), (8, 1), (1, 2)])
def test_the_update_is_the_originals_tpu_update_on_any_device_count(
    case, reference, num_devices, micro_batches
):
    """On 1 and 8 devices; with 2 micro-batches each core's gradient is summed over both
    before its clip (a core's share of a micro-batch lies within its share of the batch)."""
    config, batch, params, mems, _, _ = case
    assert jax.device_count() >= num_devices
    config = _config(grad_accum_steps=micro_batches)
    want, global_clip, want_mems = reference
    got, got_mems, metrics = _ours(config, params, mems, batch, num_devices)
    initial = [np.asarray(p, np.float64) for p in jax.tree.leaves(params)]
    largest = max(np.abs(w - p).max() for w, p in zip(want, initial, strict=True))
    assert largest > 1e-4  # the step moved the params
    # the per-core clip is another update than one clip of the sum: the test tells them apart
    assert max(np.abs(w - g).max() for w, g in zip(want, global_clip, strict=True)) > 0.1 * largest
    for g, w, p in zip(got, want, initial, strict=True):
        _close(g, w, p, largest)
    # each core's rows carried their own memory: the new memory is the cores' side by side
    np.testing.assert_allclose(got_mems, want_mems, rtol=1e-4, atol=1e-4)
    assert int(metrics["nonfinite"]) == 0


def test_a_count_that_does_not_divide_the_micro_batch_is_one_line():
    config = _config(pretrain_clip_replicas=3)
    with pytest.raises(ConfigError) as error:
        build_program(config, sharding.make_mesh(config, jax.devices()[:1]))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "config.pretrain_clip_replicas: 3 does not divide a micro-batch's 16 rows"
    )


def test_the_default_is_one_global_clip():
    assert default_config().pretrain_clip_replicas == 0
