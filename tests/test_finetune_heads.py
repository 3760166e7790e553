"""The fine-tuning encoder and heads against HF on the same weights (eval mode, float32).

XLNetEncoder against XLNetModel (left padding, the classifier's token types, two segments
through the memory); SequenceHead against XLNetForSequenceClassification (classification,
regression) and XLNetForMultipleChoice; the head's export (save_hf_head) loads into the HF
class with the same logits. Max differences print with `-s`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers

from tests.test_model_parity import SMALL, randomize_
from xlnet_jax.checkpoint.hf import (
    config_from_hf,
    encoder_params,
    head_params_from_hf,
    params_from_hf,
    save_hf_head,
)
from xlnet_jax.config import ModelConfig
from xlnet_jax.model.encoder import XLNetEncoder
from xlnet_jax.model.heads import SequenceHead

LENGTH, TOLERANCE = 12, 1e-5


def classifier_inputs(rng: np.random.Generator, batch: int, vocab: int) -> dict:
    """Rows as the original's classifier builds them: left padding (mask 1), then A <sep>
    B <sep> <cls> with token types A=0, B=1, CLS=2, PAD=4 (one row unpadded)."""
    input_ids = rng.integers(0, vocab, (batch, LENGTH))
    token_type_ids = np.full((batch, LENGTH), 4)
    input_mask = np.ones((batch, LENGTH), np.int64)
    for b in range(batch):
        real = LENGTH if b == 0 else int(rng.integers(4, LENGTH))
        split = LENGTH - real + int(rng.integers(1, real - 2))
        input_mask[b, LENGTH - real :] = 0
        token_type_ids[b, LENGTH - real : split] = 0
        token_type_ids[b, split:-1] = 1
        token_type_ids[b, -1] = 2
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, input_mask=input_mask)


def hf_model(cls, tmp_path, seed: int, **overrides):
    """A randomized HF model of class `cls`, saved to tmp_path, with our config and state."""
    torch.manual_seed(seed)
    hf_config = transformers.XLNetConfig(**SMALL, mem_len=None, **overrides)
    model = cls(hf_config).eval()
    randomize_(model, seed)
    model.save_pretrained(tmp_path)
    state = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    return model, config_from_hf(hf_config.to_dict()), state


@functools.partial(jax.jit, static_argnums=(0, 1))
def _head(config, num_outputs, params, input_ids, seg_ids, input_mask):
    batch = input_ids.shape[0]
    mems = jnp.zeros((config.n_layer, batch, 0, config.d_model))
    return SequenceHead(config, num_outputs).apply(
        {"params": params},
        input_ids,
        seg_ids,
        input_mask,
        mems,
        jnp.zeros((batch, 0), bool),
        deterministic=True,
    )[0]


def _hf_logits(model, inputs: dict) -> np.ndarray:
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()})
    return out.logits.numpy()


@pytest.mark.parametrize("num_labels", [3, 1], ids=["classification", "regression"])
def test_sequence_head_and_its_export_match_hf(tmp_path, num_labels):
    cls = transformers.XLNetForSequenceClassification
    model, config, state = hf_model(cls, tmp_path / "hf", seed=num_labels, num_labels=num_labels)
    head = "classification" if num_labels > 1 else "regression"
    params = head_params_from_hf(state, config, head)
    inputs = classifier_inputs(np.random.default_rng(0), batch=3, vocab=config.vocab_size)
    ours = np.asarray(_head(config, num_labels, params, *(jnp.asarray(v) for v in inputs.values())))
    theirs = _hf_logits(model, inputs)
    diff = float(np.abs(ours - theirs).max())
    print(f"\n{head}: max|logits diff| = {diff:.2e}, max|logits| = {np.abs(theirs).max():.2f}")
    assert ours.shape == (3, num_labels) and diff <= TOLERANCE

    labels = [f"label{i}" for i in range(num_labels)]
    save_hf_head(tmp_path / "export", config, params, head, labels)
    exported = cls.from_pretrained(tmp_path / "export").eval()
    assert exported.config.num_labels == num_labels
    assert float(np.abs(_hf_logits(exported, inputs) - ours).max()) <= TOLERANCE


def test_multiple_choice_head_matches_hf(tmp_path):
    model, config, state = hf_model(transformers.XLNetForMultipleChoice, tmp_path / "hf", seed=5)
    params = head_params_from_hf(state, config, "multiple_choice")
    batch, choices = 2, 4
    rows = classifier_inputs(np.random.default_rng(1), batch * choices, config.vocab_size)
    flat = _head(config, 1, params, *(jnp.asarray(v) for v in rows.values()))
    ours = np.asarray(flat).reshape(batch, choices)
    theirs = _hf_logits(model, {k: v.reshape(batch, choices, LENGTH) for k, v in rows.items()})
    diff = float(np.abs(ours - theirs).max())
    print(f"\nmultiple choice: max|logits diff| = {diff:.2e}")
    assert diff <= TOLERANCE

    save_hf_head(tmp_path / "export", config, params, "multiple_choice", ["A", "B", "C", "D"])
    exported = transformers.XLNetForMultipleChoice.from_pretrained(tmp_path / "export").eval()
    reshaped = {k: v.reshape(batch, choices, LENGTH) for k, v in rows.items()}
    assert float(np.abs(_hf_logits(exported, reshaped) - ours).max()) <= TOLERANCE


def test_encoder_hidden_states_and_memory_match_hf(tmp_path):
    """Two segments: the second reads the first's memory (mem_len 10 of 12 positions)."""
    torch.manual_seed(0)
    hf_config = transformers.XLNetConfig(**SMALL, mem_len=10)
    model = transformers.XLNetModel(hf_config).eval()
    randomize_(model, 7)
    model.save_pretrained(tmp_path)
    state = {
        f"transformer.{k}": v
        for k, v in safetensors.numpy.load_file(tmp_path / "model.safetensors").items()
    }
    state["lm_loss.bias"] = np.zeros(SMALL["vocab_size"], np.float32)
    config = config_from_hf(hf_config.to_dict())
    params = encoder_params(params_from_hf(state, config))
    encoder = jax.jit(
        lambda *args: XLNetEncoder(config).apply({"params": params}, *args, deterministic=True)
    )
    rng = np.random.default_rng(2)
    mems = jnp.zeros((config.n_layer, 2, 0, config.d_model))
    mem_mask = jnp.zeros((2, 0), bool)
    hf_mems, diff = None, 0.0
    for _ in range(2):
        inputs = classifier_inputs(rng, batch=2, vocab=config.vocab_size)
        inputs["input_mask"][:] = 0  # HF's memory is always visible: no padding kept in it
        hidden, mems, mem_mask = encoder(*(jnp.asarray(v) for v in inputs.values()), mems, mem_mask)
        with torch.no_grad():
            torch_inputs = {k: torch.tensor(v) for k, v in inputs.items()}
            out = model(**torch_inputs, mems=hf_mems, use_mems=True)
        hf_mems = out.mems
        diff = max(diff, float(np.abs(np.asarray(hidden) - out.last_hidden_state.numpy()).max()))
        for ours, theirs in zip(np.asarray(mems), out.mems, strict=True):
            diff = max(diff, float(np.abs(ours - theirs.numpy().transpose(1, 0, 2)).max()))
    print(f"\nencoder: max|hidden or mems diff| over two segments = {diff:.2e}")
    assert mems.shape == (config.n_layer, 2, 10, config.d_model) and diff <= TOLERANCE


def test_padding_in_memory_is_invisible():
    """A short row read as [all-padding segment, its segment] through the memory gives the
    same hidden states as the row read alone: padded memory slots are masked."""
    config = ModelConfig(**SMALL, d_head=8, mem_len=LENGTH, dropout=0.0, dropatt=0.0)
    inputs = classifier_inputs(np.random.default_rng(3), batch=2, vocab=config.vocab_size)
    ids, seg, mask = (jnp.asarray(v) for v in inputs.values())
    encoder = XLNetEncoder(config)
    empty = jnp.zeros((config.n_layer, 2, 0, config.d_model)), jnp.zeros((2, 0), bool)
    params = jax.jit(functools.partial(encoder.init, deterministic=True))(
        jax.random.key(0), ids, seg, mask, *empty
    )
    apply = jax.jit(functools.partial(encoder.apply, params, deterministic=True))
    alone = apply(ids, seg, mask, *empty)[0]
    _, mems, mem_mask = apply(ids, seg, jnp.ones_like(mask), *empty)
    assert mem_mask.shape == (2, LENGTH) and bool(mem_mask.all())
    second = apply(ids, seg, mask, mems, mem_mask)[0]
    np.testing.assert_allclose(np.asarray(second), np.asarray(alone), atol=1e-5)
