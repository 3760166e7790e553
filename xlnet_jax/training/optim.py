"""AdamW with linear warmup and linear decay, global-norm clipping and a weight-decay mask.

Weight decay follows the original (zihangdai/xlnet model_utils.AdamWeightDecayOptimizer,
which pretraining and fine-tuning both get from get_train_op): every parameter except
LayerNorm's and those named a bias, but the relative attention biases r_w/r_r/r_s_bias are
decayed (its include_in_weight_decay names them before the exclusions apply). Embeddings,
mask_emb and seg_embed decay. The Adam itself is optax's (bias-corrected) by default; the
original's is bias-corrected only when weight_decay is 0 (original_adam: fine-tuning's
default, pretraining's option pretrain_adam_variant "original").
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax


def learning_rate_schedule(config: ml_collections.ConfigDict) -> optax.Schedule:
    """Linear warmup from 0 to the peak, then linear decay to peak * min_lr_ratio."""
    peak = config.learning_rate
    warmup = optax.linear_schedule(0.0, peak, max(config.warmup_steps, 1))
    decay = optax.linear_schedule(
        peak,
        peak * config.min_lr_ratio,
        max(config.num_train_steps - config.warmup_steps, 1),
    )
    return optax.join_schedules([warmup, decay], [config.warmup_steps])


DECAYED_BIASES = ("r_w_bias", "r_r_bias", "r_s_bias")  # the original's include_in_weight_decay


def _decays(path: tuple, leaf: jax.Array) -> bool:
    """Whether weight decay applies to this parameter: the relative biases, and anything
    else that is neither a LayerNorm scale nor named a bias."""
    del leaf
    names = [str(entry.key) for entry in path if isinstance(entry, jax.tree_util.DictKey)]
    return names[-1] in DECAYED_BIASES or (names[-1] != "scale" and "bias" not in names[-1])


def weight_decay_mask(params):
    """A pytree of booleans: True where decoupled weight decay applies."""
    return jax.tree_util.tree_map_with_path(_decays, params)


def adamw(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """optax's AdamW on the warmup/decay schedule, decay on weight_decay_mask."""
    return optax.adamw(
        learning_rate=learning_rate_schedule(config),
        b1=config.adam_b1,
        b2=config.adam_b2,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        mask=weight_decay_mask,
    )


class AdamState(NamedTuple):
    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates


def original_adam(
    schedule: optax.Schedule, b1: float, b2: float, eps: float, weight_decay: float
) -> optax.GradientTransformation:
    """The original's Adam (zihangdai/xlnet model_utils.get_train_op): weight_decay 0: TF's
    AdamOptimizer (bias-corrected, epsilon added to sqrt(v) before the correction,
    lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)); weight_decay > 0: its
    AdamWeightDecayOptimizer, no bias correction, lr * (m / (sqrt(v) + eps) + wd * param)
    with the decay on weight_decay_mask. Fine-tuning's default; pretraining's option
    (pretrain_adam_variant "original")."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return AdamState(jnp.zeros((), jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        lr = schedule(state.count)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, grads)
        if weight_decay == 0:
            t = (state.count + 1).astype(jnp.float32)
            step = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
            updates = jax.tree.map(lambda m, v: -step * m / (jnp.sqrt(v) + eps), mu, nu)
        else:
            mask = weight_decay_mask(params)
            updates = jax.tree.map(
                lambda m, v, p, d: -lr * (m / (jnp.sqrt(v) + eps) + weight_decay * d * p),
                mu,
                nu,
                params,
                mask,
            )
        return updates, AdamState(state.count + 1, mu, nu)

    return optax.GradientTransformation(init, update)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """Pretraining's: global-norm clip (unless pretrain_clip_replicas > 0: the train step
    clips each core's share, training/replicas.py), then AdamW on the warmup/decay schedule
    (pretrain_adam_variant "adamw", the default) or the original's Adam ("original":
    original_adam, at weight_decay > 0 AdamWeightDecayOptimizer without bias correction)."""
    if config.get("pretrain_adam_variant", "adamw") == "original":
        b1, b2, eps = config.adam_b1, config.adam_b2, config.adam_eps
        adam = original_adam(learning_rate_schedule(config), b1, b2, eps, config.weight_decay)
    else:
        adam = adamw(config)
    if config.clip_norm <= 0 or config.get("pretrain_clip_replicas", 0) > 0:
        return adam
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), adam)
