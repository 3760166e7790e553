"""Fine-tuning's optimiser: the original's (zihangdai/xlnet model_utils.get_train_op) by
default, with common practice's forms as options.

The original, step by step: clip the gradient (clip_norm, by global norm; with clip_scope
"replica" the train step clips each replica's share instead, program.py), multiply the
gradients of `transformer/layer_N` by lr_layer_decay_rate ** (n_layer - 1 - N), then Adam:
  * weight_decay == 0: tf.train.AdamOptimizer: bias-corrected, its epsilon added to sqrt(v)
    before the correction, lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps);
  * weight_decay > 0: its AdamWeightDecayOptimizer: no bias correction,
    lr * (m / (sqrt(v) + eps) + weight_decay * param), the decay on the masked parameters.
Adam is almost invariant to a gradient's scale, so the gradient factors mostly cancel
(only epsilon and the clipping see them). lr_layer_decay_mode "update" scales each layer's
update instead (the per-layer learning rate of common practice, a much stronger decay);
adam_variant "adamw" takes pretraining's optax.adamw.

The layer factors reach only the stacked layer parameters. The relative biases (r_w, r_r,
r_s) and seg_embed live under `transformer/` in the original, not under a `layer_N`, even
when untied (then stacked [n_layer, ...]), so their factor is 1, as the embeddings' and
the head's.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from xlnet_jax.training import optim
from xlnet_jax.training.optim import AdamState, original_adam  # noqa: F401 (re-exported)

GLOBAL_IN_ORIGINAL = ("rel_biases", "seg_embed")  # stacked here, global in the original


def layer_factors(params, n_layer: int, rate: float):
    """A tree like params: [n_layer, 1, ...] factors for the stacked layer parameters the
    original scales, 1.0 for the rest."""
    factors = rate ** jnp.arange(n_layer - 1, -1, -1, dtype=jnp.float32)

    def factor(path, leaf):
        names = [str(getattr(entry, "key", entry)) for entry in path]
        if "layers" in names and not set(names) & set(GLOBAL_IN_ORIGINAL):
            return factors.reshape((n_layer,) + (1,) * (leaf.ndim - 1))
        return jnp.ones((), jnp.float32)

    return jax.tree_util.tree_map_with_path(factor, params)


def scale_by_layer(n_layer: int, rate: float) -> optax.GradientTransformation:
    """Multiplies each layer's gradient or update (whichever it is chained on) by its factor."""

    def update(updates, state, params=None):
        del params
        factors = layer_factors(updates, n_layer, rate)
        return jax.tree.map(lambda u, f: u * f.astype(u.dtype), updates, factors), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def clip_replicas(config: ml_collections.ConfigDict, data_devices: int) -> int | None:
    """How many shares the train step clips apart: None for clip_scope "global" (tx clips
    the batch's gradient), else config.clip_replicas, or the mesh's `data_devices` when
    that is 0. A count of its own, apart from the mesh, makes the update the original's
    TPU update on any machine (CrossShardOptimizer over that many cores)."""
    if config.clip_scope != "replica":
        return None
    return config.get("clip_replicas", 0) or data_devices


def make_optimizer(config: ml_collections.ConfigDict, n_layer: int) -> optax.GradientTransformation:
    """Clip (unless the train step clips per replica), the layer factors on the gradients,
    Adam, or the factors on the updates: as config's finetune fields say."""
    parts = []
    if config.clip_norm > 0 and config.clip_scope == "global":
        parts.append(optax.clip_by_global_norm(config.clip_norm))
    decay = config.lr_layer_decay_rate != 1.0
    if decay and config.lr_layer_decay_mode == "gradient":
        parts.append(scale_by_layer(n_layer, config.lr_layer_decay_rate))
    if config.adam_variant == "original":
        schedule = optim.learning_rate_schedule(config)
        b1, b2, eps = config.adam_b1, config.adam_b2, config.adam_eps
        parts.append(original_adam(schedule, b1, b2, eps, config.weight_decay))
    else:
        parts.append(optim.adamw(config))
    if decay and config.lr_layer_decay_mode == "update":
        parts.append(scale_by_layer(n_layer, config.lr_layer_decay_rate))
    return optax.chain(*parts)
