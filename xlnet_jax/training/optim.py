"""AdamW with linear warmup and linear decay, global-norm clipping and a weight-decay mask.

Weight decay follows the original (zihangdai/xlnet model_utils.AdamWeightDecayOptimizer,
which pretraining and fine-tuning both get from get_train_op): every parameter except
LayerNorm's and those named a bias, but the relative attention biases r_w/r_r/r_s_bias are
decayed (its include_in_weight_decay names them before the exclusions apply). Embeddings,
mask_emb and seg_embed decay. The Adam itself is optax's (bias-corrected); the original's
is bias-corrected only when weight_decay is 0 (fine-tuning follows it: finetune/optim.py).
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


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """Pretraining's: global-norm clip, then AdamW on the warmup/decay schedule."""
    if config.clip_norm <= 0:
        return adamw(config)
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), adamw(config))
