"""Fine-tuning's optimiser: pretraining's AdamW schedule with layer-wise learning-rate decay.

Layer l of n (0 the lowest) learns at learning_rate * lr_layer_decay_rate ** (n - 1 - l);
the embedding and the head at learning_rate, the parameters the original scales being only
its `transformer/layer_N` ones. The original multiplies the gradients by the factor, before
Adam, whose update is nearly invariant to a gradient's scale, so its decay mostly cancels
(only Adam's epsilon sees it); here the factor scales each layer's update (weight decay
included), which is what the name says: the layer's learning rate.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from xlnet_jax.training import optim


def layer_factors(params, n_layer: int, rate: float):
    """A tree like params: [n_layer, 1, ...] factors for the stacked layer parameters, 1.0 for
    the rest."""
    factors = rate ** jnp.arange(n_layer - 1, -1, -1, dtype=jnp.float32)

    def factor(path, leaf):
        names = [str(getattr(entry, "key", entry)) for entry in path]
        if "layers" in names:
            return factors.reshape((n_layer,) + (1,) * (leaf.ndim - 1))
        return jnp.ones((), jnp.float32)

    return jax.tree_util.tree_map_with_path(factor, params)


def scale_by_layer(n_layer: int, rate: float) -> optax.GradientTransformation:
    """Multiplies each layer's update by its factor (layer_factors)."""

    def update(updates, state, params=None):
        del params
        factors = layer_factors(updates, n_layer, rate)
        return jax.tree.map(lambda u, f: u * f.astype(u.dtype), updates, factors), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(config: ml_collections.ConfigDict, n_layer: int) -> optax.GradientTransformation:
    """Pretraining's optimiser, then the layer-wise factors."""
    if config.lr_layer_decay_rate == 1.0:
        return optim.make_optimizer(config)
    return optim.make_optimizer(config, scale_by_layer(n_layer, config.lr_layer_decay_rate))
