"""The SQuAD head against transformers.XLNetForQuestionAnswering on the same weights.

HF's transformer output is fed to our QAHead, so this checks the head alone; the figures
are printed with `-s`. HF's `start_top_log_probs`/`end_top_log_probs` hold probabilities
(softmax, despite the name); ours are log-probabilities, as the original's, so ours are
compared through exp. HF lays end_top_* out [B, end_n_top * start_n_top] end-major; ours
are [B, start_n_top, end_n_top].
"""

import jax
import numpy as np
import pytest
import torch
import transformers

from tests.test_model_parity import randomize_
from xlnet_jax.checkpoint.hf import config_from_hf
from xlnet_jax.checkpoint.hf_qa import head_from_hf, head_to_hf
from xlnet_jax.model.qa_head import QAHead, qa_loss

SMALL = dict(vocab_size=64, d_model=32, n_layer=1, n_head=4, d_inner=64)
BATCH, LENGTH, START_N_TOP, END_N_TOP = 3, 20, 4, 3
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def reference():
    """An HF QA model with O(1) random weights, a batch, HF's hidden states, our head."""
    torch.manual_seed(0)
    hf_config = transformers.XLNetConfig(
        **SMALL, start_n_top=START_N_TOP, end_n_top=END_N_TOP, mem_len=None
    )
    model = transformers.XLNetForQuestionAnswering(hf_config).eval()
    randomize_(model, seed=3)
    with torch.no_grad():  # the head's LayerNorm weight and last biases away from 1 and 0
        for name, p in model.named_parameters():
            if not name.startswith("transformer"):
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))
    rng = np.random.default_rng(0)
    p_mask = np.ones((BATCH, LENGTH), np.float32)
    token_types = np.ones((BATCH, LENGTH), np.int64)  # the question
    for b, paragraph in enumerate((12, 9, 15)):
        p_mask[b, :paragraph] = 0
        token_types[b, : paragraph + 1] = 0  # the paragraph and its <sep>
    p_mask[:, -1] = 0  # <cls>, where a no-answer points
    token_types[:, -1] = 2
    batch = {
        "input_ids": rng.integers(0, SMALL["vocab_size"], (BATCH, LENGTH)),
        "token_type_ids": token_types,
        "p_mask": p_mask,
        "cls_index": np.full(BATCH, LENGTH - 1),
    }
    with torch.no_grad():
        hidden = model.transformer(
            input_ids=torch.tensor(batch["input_ids"]),
            token_type_ids=torch.tensor(batch["token_type_ids"]),
        ).last_hidden_state.numpy()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    config = config_from_hf(hf_config.to_dict())
    return model, batch, hidden, head_from_hf(state), config


def _hf(model, batch, **labels):
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(batch["input_ids"]),
            token_type_ids=torch.tensor(batch["token_type_ids"]),
            p_mask=torch.tensor(batch["p_mask"]),
            cls_index=torch.tensor(batch["cls_index"]),
            **{k: torch.tensor(v) for k, v in labels.items()},
        )


def test_evaluation_outputs_equal_hf(reference):
    model, batch, hidden, params, config = reference
    ours = QAHead(config, START_N_TOP, END_N_TOP).apply(
        {"params": params}, hidden, batch["p_mask"], batch["cls_index"], deterministic=True
    )
    ours = jax.tree.map(np.asarray, ours)
    theirs = _hf(model, batch)
    hf_end = lambda x: x.numpy().reshape(BATCH, END_N_TOP, START_N_TOP).transpose(0, 2, 1)  # noqa: E731
    np.testing.assert_array_equal(ours["start_top_index"], theirs.start_top_index.numpy())
    np.testing.assert_array_equal(ours["end_top_index"], hf_end(theirs.end_top_index))
    diffs = {
        "start_top_log_probs": np.abs(
            np.exp(ours["start_top_log_probs"]) - theirs.start_top_log_probs.numpy()
        ).max(),
        "end_top_log_probs": np.abs(
            np.exp(ours["end_top_log_probs"]) - hf_end(theirs.end_top_log_probs)
        ).max(),
        "cls_logits": np.abs(ours["cls_logits"] - theirs.cls_logits.numpy()).max(),
    }
    print(f"\nQA head vs HF, evaluation, max |diff|: {diffs}")
    assert np.abs(ours["cls_logits"]).max() > 0.1  # the answer class is not trivially zero
    assert max(diffs.values()) <= TOLERANCE


def test_training_loss_equals_hf(reference):
    model, batch, hidden, params, config = reference
    labels = {
        "start_positions": np.array([3, LENGTH - 1, 14]),
        "end_positions": np.array([5, LENGTH - 1, 14]),
        "is_impossible": np.array([0.0, 1.0, 0.0], np.float32),
    }
    outputs = QAHead(config, START_N_TOP, END_N_TOP).apply(
        {"params": params},
        hidden,
        batch["p_mask"],
        batch["cls_index"],
        labels["start_positions"],
        deterministic=True,
    )
    ours = float(qa_loss(outputs, **labels))
    theirs = float(_hf(model, batch, **labels).loss)
    print(f"\nQA head vs HF, training loss: ours {ours:.7f}, HF {theirs:.7f}")
    assert abs(ours - theirs) <= TOLERANCE * max(1.0, abs(theirs))


def test_export_names_round_trip(reference):
    model, _, _, params, _ = reference
    exported = head_to_hf(params)
    state = model.state_dict()
    head_keys = {k for k in state if not k.startswith("transformer.")}
    assert set(exported) == head_keys
    for key, value in exported.items():
        np.testing.assert_array_equal(value, state[key].numpy())
