"""The official metrics against scipy and independent formulas; features as XLNet builds
them; the training order's purity; the layer-wise learning-rate factors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from xlnet_jax.data.tokenizer import CLS_ID, PAD_ID, SEP_ID
from xlnet_jax.finetune import batches, features, metrics
from xlnet_jax.finetune.optim import layer_factors
from xlnet_jax.finetune.seeds import median_results
from xlnet_jax.finetune.task import Features


@pytest.fixture(scope="module")
def binary():
    rng = np.random.default_rng(0)
    gold = rng.choice(["0", "1"], 200)
    predicted = np.where(rng.random(200) < 0.7, gold, rng.choice(["0", "1"], 200))
    return gold, predicted


def test_matthews_and_f1_against_their_definitions(binary):
    gold, predicted = binary
    g, p = (gold == "1").astype(float), (predicted == "1").astype(float)
    # Matthews: Pearson's correlation of the two 0/1 vectors (its definition for binary labels)
    assert metrics.matthews(gold, predicted) == pytest.approx(scipy.stats.pearsonr(g, p)[0])
    # F1: the harmonic mean of precision and recall of the positive class
    precision, recall = (g * p).sum() / p.sum(), (g * p).sum() / g.sum()
    assert metrics.f1(gold, predicted) == pytest.approx(
        2 * precision * recall / (precision + recall)
    )
    assert metrics.accuracy(gold, predicted) == pytest.approx((gold == predicted).mean())
    assert metrics.matthews(gold, np.full(200, "1")) == 0.0  # an empty margin, as sklearn
    assert metrics.classification_metrics("f1_accuracy", gold, predicted).keys() == {
        "f1",
        "accuracy",
    }


def test_pearson_and_spearman_against_scipy():
    rng = np.random.default_rng(1)
    gold = rng.integers(0, 6, 300) + rng.choice([0.0, 0.5], 300)  # many ties, as STS-B
    predicted = gold + rng.normal(0, 1.2, 300)
    result = metrics.regression_metrics(gold, predicted)
    assert result["pearson"] == pytest.approx(scipy.stats.pearsonr(gold, predicted)[0], abs=1e-12)
    assert result["spearman"] == pytest.approx(scipy.stats.spearmanr(gold, predicted)[0], abs=1e-12)


def test_pair_rows_are_left_padded_with_the_classifier_token_types():
    ids, seg, mask = features.pair_row([11, 12, 13], [21, 22], seq_len=10, num_segments=1)
    assert ids[0].tolist() == [PAD_ID] * 2 + [11, 12, 13, SEP_ID, 21, 22, SEP_ID, CLS_ID]
    assert seg[0].tolist() == [4, 4, 0, 0, 0, 0, 1, 1, 1, 2]
    assert mask[0].tolist() == [True] * 2 + [False] * 8
    ids, seg, _ = features.pair_row([11, 12], None, seq_len=6, num_segments=1)
    assert ids[0].tolist() == [PAD_ID, PAD_ID, 11, 12, SEP_ID, CLS_ID]
    assert seg[0].tolist() == [4, 4, 0, 0, 0, 2]
    # the original's truncation: the longer text loses its last tokens first
    ids, _, _ = features.pair_row(list(range(10, 20)), [30, 31], seq_len=8, num_segments=1)
    assert ids[0].tolist() == [10, 11, 12, SEP_ID, 30, 31, SEP_ID, CLS_ID]


def test_a_long_text_fills_consecutive_segments_ending_in_cls():
    text = list(range(100, 120))
    ids, seg, mask = features.pair_row(text, None, seq_len=8, num_segments=3)
    flat = ids.reshape(-1).tolist()
    assert ids.shape == (3, 8) and flat[-2:] == [SEP_ID, CLS_ID]
    assert flat[2:-2] == text and mask.reshape(-1).sum() == 2  # 24 = 2 pads + 20 + 2
    assert seg[-1, -1] == 2 and (seg.reshape(-1)[2:-1] == 0).all()


def test_the_batch_of_a_step_depends_on_seed_and_step_only():
    arrays = {"x": np.arange(10)}
    feats = Features(arrays, np.arange(10))
    first_epoch = np.concatenate([batches.train_indices(10, 4, 0, step) for step in (0, 1)])
    assert len(set(first_epoch)) == 8  # no repeats within an epoch
    again = batches.train_batch(feats, 4, 0, 1)
    assert (again["x"] == batches.train_batch(feats, 4, 0, 1)["x"]).all()
    assert (batches.train_batch(feats, 4, 1, 1)["x"] != again["x"]).any()
    seen = [b["x"][:n].tolist() for b, n in batches.eval_batches(feats, 4)]
    assert sum(seen, []) == list(range(10))
    last, _ = list(batches.eval_batches(feats, 4))[-1]
    assert last["weight"].tolist() == [1, 1, 0, 0]


def test_layer_factors_scale_each_layer_and_nothing_else():
    params = {
        "transformer": {"layers": {"q": jnp.ones((3, 2, 2))}, "word_embedding": jnp.ones((5, 2))},
        "logits_proj": {"kernel": jnp.ones((2, 2))},
    }
    factors = layer_factors(params, n_layer=3, rate=0.5)
    assert factors["transformer"]["layers"]["q"].reshape(-1).tolist() == [0.25, 0.5, 1.0]
    assert float(factors["transformer"]["word_embedding"]) == 1.0
    assert float(factors["logits_proj"]["kernel"]) == 1.0
    assert jax.tree.structure(factors) == jax.tree.structure(params)


def test_seeds_report_the_median_of_each_metric():
    per_seed = {
        0: {"dev": {"accuracy": 0.5, "loss": 0.9}},
        1: {"dev": {"accuracy": 0.7, "loss": 0.6}},
        2: {"dev": {"accuracy": 0.6, "loss": 0.8}},
    }
    assert median_results(per_seed) == {"dev": {"accuracy": 0.6, "loss": 0.8}}
