"""SquadModel (encoder + QA head) against transformers.XLNetForQuestionAnswering, same weights.

Windows laid out as windows.py builds them (paragraph <sep> question <sep> <cls>, padding on
the right), HF given the same p_mask, cls_index and input_mask. The figures print with -s.
HF's `start_top_log_probs`/`end_top_log_probs` hold probabilities (a softmax, despite the
name); ours are log-probabilities as the original's, so ours are compared through exp. HF
lays end_top_* out [B, end_n_top * start_n_top] end-major; ours are [B, start_n_top, end_n_top].
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers

from tests.test_model_parity import randomize_
from xlnet_jax.checkpoint.hf import config_from_hf, head_params_from_hf, save_hf_head
from xlnet_jax.data.tokenizer import CLS_ID, SEP_ID
from xlnet_jax.errors import HFFormatError
from xlnet_jax.finetune.squad.model import SquadModel, answer_mask
from xlnet_jax.model.qa_head import qa_losses

SMALL = dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_inner=64)
LENGTH, START_N_TOP, END_N_TOP = 24, 4, 3
PARAGRAPHS, QUESTIONS = (12, 9, 15), (4, 5, 3)  # a window each; the rest is padding
TOLERANCE = 1e-5


def _windows(rng: np.random.Generator) -> dict[str, np.ndarray]:
    batch = len(PARAGRAPHS)
    ids = np.zeros((batch, LENGTH), np.int64)
    types = np.full((batch, LENGTH), 3)
    mask = np.ones((batch, LENGTH), np.float32)
    p_mask = np.ones((batch, LENGTH), np.float32)
    cls_index = np.zeros(batch, np.int64)
    for b, (p, q) in enumerate(zip(PARAGRAPHS, QUESTIONS, strict=True)):
        words = rng.integers(9, SMALL["vocab_size"], p + q)
        ids[b, : p + q + 3] = [*words[:p], SEP_ID, *words[p:], SEP_ID, CLS_ID]
        types[b, : p + q + 3] = [0] * (p + 1) + [1] * (q + 1) + [2]
        mask[b, : p + q + 3] = 0
        p_mask[b, :p] = 0
        p_mask[b, p + q + 2] = 0
        cls_index[b] = p + q + 2
    return dict(
        input_ids=ids, token_type_ids=types, input_mask=mask, p_mask=p_mask, cls_index=cls_index
    )


@pytest.fixture(scope="module")
def reference():
    """An HF QA model with O(1) random weights, a batch, and our params from its state dict."""
    torch.manual_seed(0)
    hf_config = transformers.XLNetConfig(
        **SMALL, start_n_top=START_N_TOP, end_n_top=END_N_TOP, mem_len=None
    )
    model = transformers.XLNetForQuestionAnswering(hf_config).eval()
    randomize_(model, seed=3)
    with torch.no_grad():  # the head's LayerNorm and biases away from their 1 and 0 init
        for name, p in model.named_parameters():
            if not name.startswith("transformer"):
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    config = config_from_hf(hf_config.to_dict())
    params = head_params_from_hf(state, config, "question_answering")
    return model, _windows(np.random.default_rng(0)), params, config


def _ours(config, params, batch, start_positions=None, answer_class_start="expected"):
    """SquadModel's outputs ("train" only with start_positions), numpy."""
    net = SquadModel(config, START_N_TOP, END_N_TOP, answer_class_start)
    mems = jnp.zeros((config.n_layer, len(batch["input_ids"]), 0, config.d_model))
    outputs, _, _ = net.apply(
        {"params": params},
        batch["input_ids"].astype(np.int32),
        batch["token_type_ids"].astype(np.int32),
        batch["input_mask"] > 0,
        mems,
        jnp.zeros((len(batch["input_ids"]), 0), bool),
        deterministic=True,
        start_positions=start_positions,
    )
    return jax.tree.map(np.asarray, outputs)


def _hf(model, batch, **labels):
    with torch.no_grad():
        return model(**{k: torch.tensor(v) for k, v in {**batch, **labels}.items()})


def _hf_end(x) -> np.ndarray:
    return x.numpy().reshape(-1, END_N_TOP, START_N_TOP).transpose(0, 2, 1)


def test_p_mask_follows_from_the_layout(reference):
    _, batch, _, _ = reference
    derived = answer_mask(batch["input_ids"], batch["token_type_ids"], batch["input_mask"] > 0)
    np.testing.assert_array_equal(np.asarray(derived), batch["p_mask"])


def test_evaluation_outputs_equal_hf(reference):
    model, batch, params, config = reference
    ours, theirs = _ours(config, params, batch)["eval"], _hf(model, batch)
    np.testing.assert_array_equal(ours["start_top_index"], theirs.start_top_index.numpy())
    np.testing.assert_array_equal(ours["end_top_index"], _hf_end(theirs.end_top_index))
    diffs = {
        "start_top_log_probs": np.abs(
            np.exp(ours["start_top_log_probs"]) - theirs.start_top_log_probs.numpy()
        ).max(),
        "end_top_log_probs": np.abs(
            np.exp(ours["end_top_log_probs"]) - _hf_end(theirs.end_top_log_probs)
        ).max(),
        "cls_logits": np.abs(ours["cls_logits"] - theirs.cls_logits.numpy()).max(),
    }
    print(f"\nSquadModel vs XLNetForQuestionAnswering, evaluation, max |diff|: {diffs}")
    assert np.abs(ours["cls_logits"]).max() > 0.1  # the answer class is not trivially zero
    assert max(diffs.values()) <= TOLERANCE


def test_training_loss_equals_hf(reference):
    model, batch, params, config = reference
    labels = {
        "start_positions": np.array([3, batch["cls_index"][1], 14]),
        "end_positions": np.array([5, batch["cls_index"][1], 14]),
        "is_impossible": np.array([0.0, 1.0, 0.0], np.float32),
    }
    # HF trains the answer class on the gold start: our option "gold" (the default, the
    # original's expected start, is checked against its formula in test_finetune_recipe.py)
    outputs = _ours(config, params, batch, labels["start_positions"].astype(np.int32), "gold")
    ours = float(qa_losses(outputs["train"], **labels).mean())
    # the gold starts reach the training outputs only: evaluation is the same without them
    unlabelled = _ours(config, params, batch)
    assert set(unlabelled) == {"eval"}
    for key, value in outputs["eval"].items():
        np.testing.assert_array_equal(value, unlabelled["eval"][key], err_msg=key)
    theirs = float(_hf(model, batch, **labels).loss)
    print(f"\nSquadModel vs XLNetForQuestionAnswering, training loss: {ours:.7f} / {theirs:.7f}")
    assert abs(ours - theirs) <= TOLERANCE * max(1.0, abs(theirs))


def test_export_loads_into_hf_with_the_same_outputs(reference, tmp_path):
    model, batch, params, config = reference
    with pytest.raises(HFFormatError, match="start_n_top"):  # never HF's defaults silently
        save_hf_head(tmp_path, config, params, "question_answering", ["answer"])
    run_config = {"start_n_top": START_N_TOP, "end_n_top": END_N_TOP}  # not HF's 5 and 5
    save_hf_head(tmp_path, config, params, "question_answering", ["answer"], run_config)
    loaded = transformers.XLNetForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert (loaded.config.start_n_top, loaded.config.end_n_top) == (START_N_TOP, END_N_TOP)
    state = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    for key, value in model.state_dict().items():
        if key != "transformer.mask_emb":  # unused by the QA forward; written as zeros
            np.testing.assert_array_equal(state[key], value.numpy(), err_msg=key)
    theirs, reloaded = _hf(model, batch), _hf(loaded, batch)
    np.testing.assert_array_equal(reloaded.cls_logits.numpy(), theirs.cls_logits.numpy())
    np.testing.assert_array_equal(reloaded.end_top_index.numpy(), theirs.end_top_index.numpy())
