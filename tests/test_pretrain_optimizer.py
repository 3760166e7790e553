"""pretrain_adam_variant: pretraining's Adam is optax's adamw by default and the original's
AdamWeightDecayOptimizer (zihangdai/xlnet model_utils, no bias correction) as an option,
against a numpy re-implementation of the original's update, after the global clip."""

import jax
import numpy as np
import optax

from xlnet_jax.config import default_config
from xlnet_jax.training import optim

STEPS = 4


def _params(rng):
    return {
        "layer": {"kernel": rng.normal(size=(3, 4)).astype(np.float32),
                  "bias": rng.normal(size=(4,)).astype(np.float32)},
        "LayerNorm": {"scale": rng.normal(size=(4,)).astype(np.float32)},
        "r_w_bias": rng.normal(size=(2, 2)).astype(np.float32),
    }  # fmt: skip


def _config(variant: str):
    c = default_config()
    c.pretrain_adam_variant = variant
    c.learning_rate, c.warmup_steps, c.num_train_steps = 0.1, 2, STEPS + 2
    c.weight_decay, c.clip_norm, c.adam_eps = 0.01, 1.0, 1e-6
    return c


def _run(tx, params, grads):
    state = tx.init(params)
    for g in grads:
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
    return params


def _reference(params, grads, config):
    """The original's step in numpy: clip_by_global_norm, then AdamWeightDecayOptimizer:
    m, v without bias correction, lr * (m / (sqrt(v) + eps) + wd * p) on the decayed
    parameters (not LayerNorm, not biases, but the r_*_bias)."""
    flat = {k: np.asarray(v, np.float64) for k, v in jax.tree_util.tree_leaves_with_path(params)}
    paths = list(flat)
    decays = {p: p[-1].key == "r_w_bias" or p[-1].key not in ("bias", "scale") for p in paths}
    m = {p: 0.0 for p in paths}
    v = {p: 0.0 for p in paths}
    b1, b2, eps, wd, c = config.adam_b1, config.adam_b2, config.adam_eps, 0.01, config.clip_norm
    schedule = optim.learning_rate_schedule(config)
    for step, g in enumerate(grads):
        g = dict(zip(paths, (np.asarray(x, np.float64) for x in jax.tree.leaves(g)), strict=True))
        norm = np.sqrt(sum((x**2).sum() for x in g.values()))
        g = {p: x * c / max(norm, c) for p, x in g.items()}
        lr = float(schedule(step))
        for p in paths:
            m[p] = b1 * m[p] + (1 - b1) * g[p]
            v[p] = b2 * v[p] + (1 - b2) * g[p] ** 2
            flat[p] = flat[p] - lr * (
                m[p] / (np.sqrt(v[p]) + eps) + (wd * flat[p] if decays[p] else 0)
            )
    return flat


def test_the_original_option_is_adam_weight_decay_and_the_default_is_optax_adamw():
    rng = np.random.default_rng(0)
    params = _params(rng)
    grads = [jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
             for _ in range(STEPS)]  # fmt: skip
    config = _config("original")
    ours = _run(optim.make_optimizer(config), params, grads)
    want = _reference(params, grads, config)
    for path, leaf in jax.tree_util.tree_leaves_with_path(ours):
        np.testing.assert_allclose(leaf, want[path], rtol=2e-5, atol=2e-6)
    default = default_config()
    assert default.pretrain_adam_variant == "adamw"
    adamw = _run(optim.make_optimizer(_config("adamw")), params, grads)
    expected = _run(
        optax.chain(optax.clip_by_global_norm(1.0), optim.adamw(_config("adamw"))), params, grads
    )
    jax.tree.map(np.testing.assert_array_equal, adamw, expected)
    # bias correction makes the early steps differ: the option is another update
    gap = max(
        np.abs(a - o).max() for a, o in zip(*map(jax.tree.leaves, (adamw, ours)), strict=True)
    )
    assert gap > 1e-3


def test_gelu_new_is_the_originals_tanh_gelu():
    """modeling.gelu of the original: x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)));
    "gelu" stays the exact erf form (HF's), up to 4.7e-4 away."""
    from xlnet_jax.model.xlnet import ACTIVATIONS

    x = np.linspace(-6, 6, 2001).astype(np.float32)
    xd = x.astype(np.float64)
    want = xd * 0.5 * (1.0 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)))
    np.testing.assert_allclose(np.asarray(ACTIVATIONS["gelu_new"](x)), want, rtol=1e-6, atol=1e-6)
    gap = np.abs(np.asarray(ACTIVATIONS["gelu"](x)) - want).max()
    assert 4e-4 < gap < 5e-4
