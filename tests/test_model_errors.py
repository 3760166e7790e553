"""Bad configs and bad input shapes raise ValueError naming the culprit, before any tracing."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.xlnet import XLNetLM, validate_model_config

CONFIG = ModelConfig(vocab_size=32, d_model=16, n_layer=2, n_head=2, d_head=8, d_inner=32)
B, L, P, M = 2, 6, 2, 3


def _inputs(**overrides) -> dict:
    inputs = dict(
        input_ids=jnp.zeros((B, L), jnp.int32),
        seg_ids=jnp.zeros((B, L), jnp.int32),
        perm_mask=jnp.zeros((B, L, L), bool),
        target_pos=jnp.zeros((B, P), jnp.int32),
        mems=jnp.zeros((CONFIG.n_layer, B, M, CONFIG.d_model)),
    )
    return {**inputs, **overrides}


def _init(config: ModelConfig, inputs: dict):
    """Traces init for shapes only (jax.eval_shape): the checks must fire before this matters."""
    model = XLNetLM(config)
    return jax.eval_shape(lambda: model.init(jax.random.key(0), **inputs, deterministic=True))


@pytest.mark.parametrize(
    "changes,field",
    [
        (dict(n_head=3), "d_model"),
        (dict(d_model=15, n_head=3), "d_model"),
        (dict(ff_activation="swish"), "ff_activation"),
        (dict(dtype="float16"), "dtype"),
        (dict(n_layer=0), "n_layer"),
        (dict(vocab_size=-1), "vocab_size"),
        (dict(mem_len=-1), "mem_len"),
        (dict(dropatt=1.0), "dropatt"),
    ],
)
def test_bad_config(changes, field):
    config = dataclasses.replace(CONFIG, **changes)
    with pytest.raises(ValueError, match=field):
        validate_model_config(config)
    with pytest.raises(ValueError, match=field):
        _init(config, _inputs())


@pytest.mark.parametrize(
    "argument,value",
    [
        ("input_ids", jnp.zeros((B * L,), jnp.int32)),
        ("seg_ids", jnp.zeros((B, L + 1), jnp.int32)),
        ("perm_mask", jnp.zeros((B, L, L + 1), bool)),
        ("perm_mask", jnp.zeros((B, L), bool)),
        ("target_pos", jnp.zeros((B + 1, P), jnp.int32)),
        ("target_pos", jnp.zeros((B,), jnp.int32)),
        ("mems", jnp.zeros((CONFIG.n_layer + 1, B, M, CONFIG.d_model))),
        ("mems", jnp.zeros((CONFIG.n_layer, B + 1, M, CONFIG.d_model))),
        ("mems", jnp.zeros((CONFIG.n_layer, B, M, CONFIG.d_model + 1))),
        ("mems", jnp.zeros((B, M, CONFIG.d_model))),
    ],
)
def test_bad_input_shape(argument, value):
    with pytest.raises(ValueError, match=argument):
        _init(CONFIG, _inputs(**{argument: value}))


def test_bi_data_needs_even_batch_or_explicit_directions():
    config = dataclasses.replace(CONFIG, bi_data=True)
    odd = _inputs(**{k: v[:, :1] if k == "mems" else v[:1] for k, v in _inputs().items()})
    with pytest.raises(ValueError, match="is_backward"):
        _init(config, odd)
    with pytest.raises(ValueError, match="is_backward"):
        _init(config, {**_inputs(), "is_backward": jnp.zeros((B + 1,), bool)})
    shapes = _init(config, {**odd, "is_backward": jnp.ones((1,), bool)})
    assert shapes["params"]["mask_emb"].value.shape == (1, 1, CONFIG.d_model)
