"""XLNetLM called with HuggingFace's argument conventions: the tests' bridge to HF parity.

HF's mem_len None/0 means "keep everything"; ours 0 means no memory, so hf_forward returns
empty memories there.
"""

import functools
from collections.abc import Sequence

import jax
import numpy as np

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.xlnet import XLNetLM

Params = dict


@functools.partial(jax.jit, static_argnums=0)
def _apply(config: ModelConfig, params: Params, input_ids, seg_ids, perm_mask, target_pos, mems):
    return XLNetLM(config).apply(
        {"params": params}, input_ids, seg_ids, perm_mask, target_pos, mems, deterministic=True
    )


def hf_forward(
    config: ModelConfig,
    params: Params,
    *,
    input_ids,
    token_type_ids,
    perm_mask,
    target_mapping,
    mems: Sequence | None = None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """XLNetLM (the training code's model, deterministic) called with HF's argument conventions.

    Args:
      config, params: the model.
      input_ids: int [B, L].
      token_type_ids: int [B, L].
      perm_mask: [B, L, L], nonzero where i may NOT attend j.
      target_mapping: one-hot [B, P, L]: row p of example b predicts position argmax.
      mems: None or a list of n_layer arrays [M, B, D] (length-major, as HF).

    Returns:
      logits float32 [B, P, vocab] and new mems: a list of n_layer arrays [M', B, D].
    """
    input_ids = np.asarray(input_ids, np.int32)
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {input_ids.shape}")
    batch, length = input_ids.shape
    token_type_ids = np.asarray(token_type_ids, np.int32)
    if token_type_ids.shape != (batch, length):
        raise ValueError(
            f"token_type_ids must have shape {(batch, length)}, got {token_type_ids.shape}"
        )
    perm_mask = np.asarray(perm_mask)
    if perm_mask.shape != (batch, length, length):
        raise ValueError(
            f"perm_mask must have shape {(batch, length, length)}, got {perm_mask.shape}"
        )
    target_mapping = np.asarray(target_mapping)
    if target_mapping.ndim != 3 or target_mapping.shape[::2] != (batch, length):
        raise ValueError(
            f"target_mapping must be [{batch}, num_predict, {length}], got {target_mapping.shape}"
        )
    if (
        not ((target_mapping == 0) | (target_mapping == 1)).all()
        or (target_mapping.sum(-1) != 1).any()
    ):
        raise ValueError("target_mapping must be one-hot: exactly one 1 per [batch, predict] row")
    mems = (
        [np.zeros((0, batch, config.d_model), np.float32)] * config.n_layer
        if mems is None
        else mems
    )
    shapes = [np.shape(m) for m in mems]
    layer_shape = (shapes[0][0] if shapes and shapes[0] else 0, batch, config.d_model)
    if len(mems) != config.n_layer or any(shape != layer_shape for shape in shapes):
        raise ValueError(
            f"mems must be a list of n_layer={config.n_layer} arrays [mem_len, {batch}, "
            f"{config.d_model}], got shapes {shapes}"
        )
    stacked = np.stack([np.asarray(m, np.float32) for m in mems]).transpose(0, 2, 1, 3)
    logits, new_mems = _apply(
        config,
        params,
        input_ids,
        token_type_ids,
        perm_mask != 0,
        target_mapping.argmax(-1).astype(np.int32),
        stacked,
    )
    return np.asarray(logits), list(np.asarray(new_mems).transpose(0, 2, 1, 3))
