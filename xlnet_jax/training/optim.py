"""AdamW with linear warmup and linear decay, global-norm clipping and a weight-decay mask.

Weight decay follows the original: every parameter except LayerNorm scales and anything
named a bias, which includes the r_w/r_r/r_s attention biases (per-head offsets added to
the queries, as biases are). Embeddings, mask_emb and seg_embed decay.
"""

import jax
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


def _decays(path: tuple, leaf: jax.Array) -> bool:
    """Whether weight decay applies to this parameter (not LayerNorm scales, not biases)."""
    del leaf
    names = [str(entry.key) for entry in path if isinstance(entry, jax.tree_util.DictKey)]
    return names[-1] != "scale" and "bias" not in names[-1]


def weight_decay_mask(params):
    """A pytree of booleans: True where decoupled weight decay applies."""
    return jax.tree_util.tree_map_with_path(_decays, params)


def make_optimizer(
    config: ml_collections.ConfigDict, *after: optax.GradientTransformation
) -> optax.GradientTransformation:
    """Global-norm clip, then AdamW on the warmup/decay schedule, then `after` (fine-tuning's
    layer-wise factors) on the updates."""
    adamw = optax.adamw(
        learning_rate=learning_rate_schedule(config),
        b1=config.adam_b1,
        b2=config.adam_b2,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        mask=weight_decay_mask,
    )
    parts = [optax.clip_by_global_norm(config.clip_norm)] if config.clip_norm > 0 else []
    parts += [adamw, *after]
    return parts[0] if len(parts) == 1 else optax.chain(*parts)
