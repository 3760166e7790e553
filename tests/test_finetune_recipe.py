"""Fine-tuning's recipe against independent numpy re-implementations of the original's
formulas (zihangdai/xlnet), and the HF / common-practice forms kept as options.

  * function_builder.get_qa_outputs: the answer class reads the softmax(start)-weighted
    state in training too (answer_class_start "expected"; "gold" is HF's).
  * model_utils.get_train_op: clip, layer-wise factors on the GRADIENTS of layer_N (not on
    the global r_*_bias / seg_embed), then tf.train.AdamOptimizer (weight_decay 0) or
    model_utils.AdamWeightDecayOptimizer (weight_decay > 0: no bias correction, r_*_bias
    decayed, LayerNorm and biases not).
  * TF1's CrossShardOptimizer (reduction MEAN) + get_train_op's clip: each replica's
    gradient of its mean loss / replicas is clipped, then the replicas' are summed.
  * classifier_utils.convert_single_example: an empty text B gives A <sep> <cls>.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from xlnet_jax.config import ModelConfig
from xlnet_jax.data.tokenizer import CLS_ID, SEP_ID
from xlnet_jax.finetune import optim
from xlnet_jax.finetune.compile import example_batch
from xlnet_jax.finetune.config import finetune_config
from xlnet_jax.finetune.features import pair_row
from xlnet_jax.finetune.program import build, replica_gradients
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.model.qa_head import QAHead, qa_losses
from xlnet_jax.training import optim as pretraining_optim
from xlnet_jax.training.sharding import make_mesh

N_LAYER, RATE, STEPS = 3, 0.5, 4
CONFIG = ModelConfig(vocab_size=40, d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64)


# --- the answer class (function_builder.get_qa_outputs) ---


@pytest.fixture(scope="module")
def qa_case():
    rng = np.random.default_rng(0)
    batch, length = 3, 10
    hidden = rng.normal(size=(batch, length, CONFIG.d_model)).astype(np.float32)
    p_mask = np.ones((batch, length), np.float32)
    p_mask[:, :6] = 0.0
    p_mask[:, 9] = 0.0  # <cls>
    inputs = dict(
        hidden=jnp.asarray(hidden),
        p_mask=jnp.asarray(p_mask),
        cls_index=jnp.full((batch,), 9, jnp.int32),
        start_positions=jnp.array([2, 9, 4], jnp.int32),
    )
    params = QAHead(CONFIG).init(jax.random.PRNGKey(1), **inputs, deterministic=True)["params"]
    params = jax.tree.map(lambda p: p + 0.3 * rng.normal(size=p.shape).astype(np.float32), params)
    return inputs, params


def _answer_class_reference(inputs, params, gold: bool) -> np.ndarray:
    """The original's answer class in numpy: start logits masked by p_mask, the start
    feature their softmax-weighted hidden state (or, HF's, the gold start's), concat with
    <cls>'s, dense, tanh, dense without bias."""
    h = np.asarray(inputs["hidden"], np.float64)
    p_mask = np.asarray(inputs["p_mask"], np.float64)
    start = params["start_logits"]["dense"]
    logits = h @ np.asarray(start["kernel"])[:, 0] + np.asarray(start["bias"])[0]
    logits = logits * (1 - p_mask) - 1e30 * p_mask
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    rows = np.arange(len(h))
    start_feature = (
        h[rows, np.asarray(inputs["start_positions"])]
        if gold
        else np.einsum("bld,bl->bd", h, probs)
    )
    cls_feature = h[rows, np.asarray(inputs["cls_index"])]
    answer = params["answer_class"]
    x = np.concatenate([start_feature, cls_feature], -1) @ np.asarray(answer["dense_0"]["kernel"])
    x = np.tanh(x + np.asarray(answer["dense_0"]["bias"]))
    return x @ np.asarray(answer["dense_1"]["kernel"])[:, 0]


@pytest.mark.parametrize("answer_class_start", ["expected", "gold"])
def test_answer_class_in_training_reads_the_configured_start(qa_case, answer_class_start):
    inputs, params = qa_case
    head = QAHead(CONFIG, answer_class_start=answer_class_start)
    ours = head.apply({"params": params}, **inputs, deterministic=True)["cls_logits"]
    reference = _answer_class_reference(inputs, params, gold=answer_class_start == "gold")
    other = _answer_class_reference(inputs, params, gold=answer_class_start != "gold")
    assert np.abs(reference - other).max() > 1e-2  # the two forms are told apart here
    np.testing.assert_allclose(np.asarray(ours), reference, atol=1e-5, rtol=1e-5)
    # evaluation is the expected start in both (the original's, and HF's)
    evaluation = head.apply(
        {"params": params}, **{**inputs, "start_positions": None}, deterministic=True
    )["cls_logits"]
    expected = _answer_class_reference(inputs, params, gold=False)
    np.testing.assert_allclose(np.asarray(evaluation), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("answer_class_start", ["expected", "gold"])
def test_answer_class_loss_trains_the_start_logits_only_in_the_original(
    qa_case, answer_class_start
):
    """The original's answer-class BCE reaches start_logits through the softmax; HF's not."""
    inputs, params = qa_case
    head = QAHead(CONFIG, answer_class_start=answer_class_start)
    positions = inputs["start_positions"]
    impossible = jnp.array([0.0, 1.0, 0.0])

    def answer_class_loss(p):
        outputs = head.apply({"params": p}, **inputs, deterministic=True)
        zero = {**outputs, "start_logits": jax.lax.stop_gradient(outputs["start_logits"])}
        return jnp.mean(qa_losses(zero, positions, positions, impossible))

    grad = jax.grad(answer_class_loss)(params)["start_logits"]["dense"]["kernel"]
    norm = float(jnp.linalg.norm(grad))
    assert norm > 1e-4 if answer_class_start == "expected" else norm == 0.0


# --- the optimiser (model_utils.get_train_op, AdamWeightDecayOptimizer) ---


def _params(rng: np.random.Generator) -> dict:
    """A tree laid out as ours: stacked layers (with the relative biases and seg_embed, per
    layer here but global in the original), embeddings, a head."""

    def r(*shape):
        return rng.normal(size=shape).astype(np.float32)

    return {
        "transformer": {
            "layers": {
                "attention": {
                    "q": r(N_LAYER, 4, 2),
                    "rel_biases": {"r_w_bias": r(N_LAYER, 2), "r_s_bias": r(N_LAYER, 2)},
                    "seg_embed": r(N_LAYER, 2, 2),
                    "layer_norm": {"scale": r(N_LAYER, 4), "bias": r(N_LAYER, 4)},
                },
                "ffn": {"layer_1": {"kernel": r(N_LAYER, 4, 3), "bias": r(N_LAYER, 3)}},
            },
            "word_embedding": {"embedding": r(5, 4)},
        },
        "head": {"dense": {"kernel": r(4, 2), "bias": r(2)}},
    }


def _flat(tree) -> dict[str, np.ndarray]:
    """The original's variable names: 'model/transformer/layer_N/...' for a stacked layer
    parameter (layers/<rest> in ours), the rest by their path."""
    flat = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        names = [str(entry.key) for entry in path]
        if "layers" in names and not {"rel_biases", "seg_embed"} & set(names):
            rest = "/".join(names[names.index("layers") + 1 :])
            for layer in range(N_LAYER):
                flat[f"model/transformer/layer_{layer}/{rest}"] = np.asarray(
                    leaf[layer], np.float64
                )
        else:
            flat["model/" + "/".join(n for n in names if n != "layers")] = np.asarray(
                leaf, np.float64
            )
    return flat


def _reference_steps(params, grads_per_step, config, mode: str) -> dict[str, np.ndarray]:
    """get_train_op in numpy, on the original's per-layer variables: clip by global norm,
    multiply layer_N's gradient by rate ** (n - 1 - N) ("gradient" mode; "update" scales
    the update instead), then TF's AdamOptimizer (weight_decay 0) or AdamWeightDecayOptimizer
    (weight_decay > 0; decay unless the name matches LayerNorm/layer_norm/bias, r_*_bias
    always)."""
    b1, b2, eps, wd = config.adam_b1, config.adam_b2, config.adam_eps, config.weight_decay
    flat = _flat(params)
    m = {k: np.zeros_like(v) for k, v in flat.items()}
    v = {k: np.zeros_like(x) for k, x in flat.items()}

    def factor(name: str) -> float:
        found = re.search(r"model/transformer/layer_(\d+)/", name)
        return RATE ** (N_LAYER - 1 - int(found.group(1))) if found else 1.0

    def decays(name: str) -> bool:
        if any(re.search(r, name) for r in ("r_s_bias", "r_r_bias", "r_w_bias")):
            return True
        return not any(re.search(r, name) for r in ("LayerNorm", "layer_norm", "bias"))

    for step, grads in enumerate(grads_per_step):
        lr = config.learning_rate * min(1.0, step / config.warmup_steps) if step else 0.0
        if step >= config.warmup_steps:
            done = (step - config.warmup_steps) / (config.num_train_steps - config.warmup_steps)
            lr = config.learning_rate * (1 - done)
        g = _flat(grads)
        norm = np.sqrt(sum((x**2).sum() for x in g.values()))
        g = {k: x * config.clip_norm / max(norm, config.clip_norm) for k, x in g.items()}
        if mode == "gradient":
            g = {k: x * factor(k) for k, x in g.items()}
        t = step + 1
        for k in flat:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            if wd == 0:
                update = lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m[k] / (np.sqrt(v[k]) + eps)
            else:
                update = lr * (m[k] / (np.sqrt(v[k]) + eps) + (wd * flat[k] if decays(k) else 0))
            flat[k] = flat[k] - update * (factor(k) if mode == "update" else 1.0)
    return flat


def _ours(params, grads_per_step, config) -> dict[str, np.ndarray]:
    tx = optim.make_optimizer(config, N_LAYER)
    if config.clip_scope == "replica":  # the train step clips (one replica here)
        clip = optax.clip_by_global_norm(config.clip_norm)
        grads_per_step = [clip.update(g, clip.init(g))[0] for g in grads_per_step]
    state, update = tx.init(params), jax.jit(tx.update)
    for grads in grads_per_step:
        updates, state = update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return _flat(params)


@pytest.mark.parametrize(
    "mode,weight_decay,clip_scope",
    [("gradient", 0.0, "replica"), ("gradient", 0.1, "global"), ("update", 0.0, "global")],
)
def test_optimizer_equals_the_originals_formula(mode, weight_decay, clip_scope):
    rng = np.random.default_rng(1)
    params = _params(rng)
    grads = [jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)]
    grads += [jax.tree.map(lambda g: g * 1e-3, grads[0])]  # under the clip: scale matters
    grads += [jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)]
    grads += [grads[1]]
    config = finetune_config()
    config.learning_rate, config.warmup_steps, config.num_train_steps = 0.1, 2, STEPS + 2
    config.lr_layer_decay_rate, config.lr_layer_decay_mode = RATE, mode
    config.weight_decay, config.clip_scope = weight_decay, clip_scope
    config.adam_eps = 1e-3  # large enough that the gradient factors show through Adam
    ours = _ours(params, grads, config)
    reference = _reference_steps(params, grads, config, mode)
    assert ours.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_allclose(ours[name], value, rtol=2e-5, atol=2e-6, err_msg=name)
    if mode == "gradient":  # the other mode gives another result: the test tells them apart
        other = _reference_steps(params, grads, config, "update")
        assert max(np.abs(other[k] - reference[k]).max() for k in reference) > 1e-3


def test_adamw_option_is_optax_adamw():
    rng = np.random.default_rng(2)
    params = _params(rng)
    grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
    config = finetune_config()
    config.adam_variant, config.weight_decay, config.clip_scope = "adamw", 0.1, "global"
    ours = optim.make_optimizer(config, N_LAYER)
    theirs = pretraining_optim.make_optimizer(config)
    a, _ = ours.update(grads, ours.init(params), params)
    b, _ = theirs.update(grads, theirs.init(params), params)
    jax.tree.map(np.testing.assert_array_equal, a, b)


# --- per-replica clipping (CrossShardOptimizer + get_train_op) ---


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_replica_clipping_equals_the_tpu_steps_formula(micro_batches):
    """A linear least-squares loss, 4 replicas of 2 rows (weights 1, one row weight 0): the
    gradient is sum_r clip(grad(mean loss of r) / 4), computed in numpy. With 2
    micro-batches (one row per replica each) each replica's gradient is accumulated over
    both before its clip: the same formula."""
    rng = np.random.default_rng(3)
    replicas, rows, width = 4, 2, 5
    x = rng.normal(size=(replicas * rows, width)).astype(np.float32)
    y = rng.normal(size=(replicas * rows,)).astype(np.float32) * 10
    weight = np.ones(replicas * rows, np.float32)
    weight[3] = 0.0
    w = {"w": rng.normal(size=(width,)).astype(np.float32)}

    def loss_fn(params, batch, key, total_weight):
        del key
        errors = (batch["x"] @ params["w"] - batch["y"]) ** 2
        return jnp.sum(errors * batch["weight"]) / jnp.maximum(total_weight, 1.0), ()

    batch = {"x": jnp.asarray(x), "y": jnp.asarray(y), "weight": jnp.asarray(weight)}
    loss, raw, clipped = replica_gradients(
        loss_fn, w, batch, jax.random.PRNGKey(0), replicas, clip_norm=1.0,
        micro_batches=micro_batches,
    )  # fmt: skip
    total, expected_raw, losses = np.zeros(width), np.zeros(width), []
    for r in range(replicas):
        xs, ys, ws = (a[r * rows : (r + 1) * rows].astype(np.float64) for a in (x, y, weight))
        residual = xs @ w["w"] - ys
        grad = (2 * (residual * ws) @ xs / max(ws.sum(), 1.0)) / replicas
        expected_raw += grad
        total += grad * 1.0 / max(np.linalg.norm(grad), 1.0)
        losses.append((residual**2 * ws).sum())
    assert np.linalg.norm(expected_raw) > 2.0  # the clip acts
    np.testing.assert_allclose(np.asarray(clipped["w"]), total, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(raw["w"]), expected_raw, rtol=1e-5)
    np.testing.assert_allclose(float(loss), sum(losses) / weight.sum(), rtol=1e-5)


# --- rows (classifier_utils.convert_single_example) ---


def test_an_empty_text_b_gives_a_sep_cls():
    ids, seg, mask = pair_row([11, 12, 13], [], seq_len=8, num_segments=1)
    expected = pair_row([11, 12, 13], None, seq_len=8, num_segments=1)
    for ours, single in zip((ids, seg, mask), expected, strict=True):
        np.testing.assert_array_equal(ours, single)
    kept = ids[0][~mask[0]]
    assert list(kept) == [11, 12, 13, SEP_ID, CLS_ID]


def test_replica_clipping_computes_each_share_once_on_its_device():
    """The compiled train step on the 8 CPU devices: per-replica clipping costs about the
    FLOPs of the global step (each device its own share), not 8 times them."""
    flops = {}
    for scope in ("global", "replica"):
        config = finetune_config()
        config.vocab_size, config.d_model, config.n_layer = 64, 32, 2
        config.n_head, config.d_head, config.d_inner = 2, 16, 64
        config.seq_len, config.batch_size, config.clip_scope = 16, 8, scope
        task = get_task("classification")
        example = example_batch(task, config)
        program = build(config, task, ["a", "b"], make_mesh(config, jax.devices()), example)
        with program.activate():
            lowered = program.train_step.lower(
                program.abstract_state, program.abstract_batch(example)
            )
        flops[scope] = lowered.compile().cost_analysis()["flops"]
    assert jax.device_count() == 8
    assert flops["replica"] <= 1.25 * flops["global"], flops
