"""XLNetLM against transformers.XLNetLMHeadModel (random weights, eval mode), and model structure.

The max abs differences are printed: `pytest tests/test_model_parity.py -s -k parity`.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers
from jax.sharding import PartitionSpec as P

from tests.helpers import HF_PARITY_ROUNDINGS, assert_trees_f32_close, f32_roundings
from tests.hf_reference import hf_forward
from xlnet_jax.checkpoint.hf import config_from_hf, param_shapes, params_from_hf
from xlnet_jax.config import ModelConfig
from xlnet_jax.model.xlnet import XLNetLM

SMALL = dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_inner=64)


def random_plm_inputs(
    rng: np.random.Generator, batch: int, length: int, num_predict: int, vocab: int
) -> dict:
    """A batch as the PLM objective makes it, in HF's conventions (batch-major).

    Per row: a random factorization order over `num_predict` random targets (non-targets come
    first: rank -1), perm_mask[i, j] = 1 iff j is a target with rank >= i's self rank (targets
    never see themselves); token types A=0, B=1 and a final CLS=2.
    """
    input_ids = rng.integers(0, vocab, (batch, length))
    token_type_ids = np.zeros((batch, length), np.int64)
    perm_mask = np.zeros((batch, length, length), np.float32)
    target_mapping = np.zeros((batch, num_predict, length), np.float32)
    for b in range(batch):
        split = rng.integers(1, length - 1)
        token_type_ids[b, split:] = 1
        token_type_ids[b, -1] = 2
        targets = rng.choice(length, num_predict, replace=False)  # in no particular order
        rank = np.full(length, -1)
        rank[targets] = rng.permutation(num_predict)
        self_rank = np.where(rank >= 0, rank, 0)
        perm_mask[b] = (self_rank[:, None] <= rank[None, :]) & (rank[None, :] >= 0)
        target_mapping[b, np.arange(num_predict), targets] = 1.0
    return dict(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        perm_mask=perm_mask,
        target_mapping=target_mapping,
    )


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Swaps the 0.02-normal init for O(1)-activation weights: position errors must show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "layer_norm.weight" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("bias", "seg_embed")):
                p.copy_(0.5 * noise)
            elif name.endswith(("word_embedding.weight", "mask_emb")):
                p.copy_(noise)
            else:
                p.copy_(noise / p.shape[-1 if "ff.layer" in name else 0] ** 0.5)


# (name, HF config overrides, untie_r, batch, reuse_len/mem_len need two segments)
VARIANTS = [
    ("gelu", dict(), True, 2, False),
    ("relu", dict(ff_activation="relu"), True, 2, False),
    ("bi_data", dict(bi_data=True), True, 4, False),
    ("clamp_len", dict(clamp_len=3), True, 2, False),
    ("tied_r", dict(), False, 2, False),
    ("memory", dict(mem_len=10), True, 2, True),
    (
        "memory_reuse_bi_clamp",
        dict(mem_len=9, reuse_len=5, bi_data=True, clamp_len=4, ff_activation="relu"),
        True,
        4,
        True,
    ),
]


@pytest.mark.parametrize(
    "name,overrides,untie_r,batch,two_segments", VARIANTS, ids=[v[0] for v in VARIANTS]
)
def test_parity_with_hf(tmp_path, name, overrides, untie_r, batch, two_segments):
    torch.manual_seed(0)
    hf_config = transformers.XLNetConfig(**SMALL, **{"mem_len": None, **overrides})
    hf_model = transformers.XLNetLMHeadModel(hf_config).eval()
    randomize_(hf_model, seed=len(name))
    if not untie_r:  # HF is always per-layer; a tied model is one with equal per-layer biases.
        with torch.no_grad():
            first = hf_model.transformer.layer[0].rel_attn
            for layer in hf_model.transformer.layer[1:]:
                for b in ("r_w_bias", "r_r_bias", "r_s_bias"):
                    getattr(layer.rel_attn, b).copy_(getattr(first, b))
    hf_model.save_pretrained(tmp_path)
    config = dataclasses.replace(config_from_hf(hf_config.to_dict()), untie_r=untie_r)
    params = params_from_hf(safetensors.numpy.load_file(tmp_path / "model.safetensors"), config)

    rng = np.random.default_rng(1)
    hf_mems, our_mems, logits_diff, mems_diff = None, None, 0.0, 0.0
    logits_roundings, mems_roundings = 0.0, 0.0
    for _ in range(2 if two_segments else 1):  # the second segment is fed the first's mems
        inputs = random_plm_inputs(rng, batch, length=12, num_predict=4, vocab=SMALL["vocab_size"])
        with torch.no_grad():
            torch_inputs = {k: torch.tensor(v) for k, v in inputs.items()}
            out = hf_model(**torch_inputs, mems=hf_mems, use_mems=two_segments)
        logits, new_mems = hf_forward(config, params, **inputs, mems=our_mems)
        logits_diff = max(logits_diff, float(np.abs(logits - out.logits.numpy()).max()))
        logits_roundings = max(logits_roundings, f32_roundings(logits, out.logits.numpy()))
        if two_segments:
            assert [m.shape for m in new_mems] == [tuple(m.shape) for m in out.mems]
            for ours, theirs in zip(new_mems, out.mems, strict=True):
                mems_diff = max(mems_diff, float(np.abs(ours - theirs.numpy()).max()))
                mems_roundings = max(mems_roundings, f32_roundings(ours, theirs.numpy()))
            hf_mems, our_mems = out.mems, new_mems
    mems_note = (
        f"{mems_diff:.2e} ({mems_roundings:.0f} roundings)" if two_segments else "n/a (one segment)"
    )
    print(
        f"\nparity[{name}]: max|logits diff| = {logits_diff:.2e} ({logits_roundings:.0f} float32 "
        f"roundings of the logits' scale), max|mems diff| = {mems_note}"
    )
    assert logits_roundings <= HF_PARITY_ROUNDINGS and mems_roundings <= HF_PARITY_ROUNDINGS


def _model_inputs(config: ModelConfig, batch=2, length=6, num_predict=2, mem=3) -> tuple:
    """XLNetLM's positional inputs (input_ids, seg_ids, perm_mask, target_pos, mems)."""
    rng = np.random.default_rng(0)
    inputs = random_plm_inputs(rng, batch, length, num_predict, config.vocab_size)
    return (
        jnp.asarray(inputs["input_ids"], jnp.int32),
        jnp.asarray(inputs["token_type_ids"], jnp.int32),
        jnp.asarray(inputs["perm_mask"] > 0),
        jnp.asarray(inputs["target_mapping"].argmax(-1), jnp.int32),
        jnp.asarray(rng.normal(size=(config.n_layer, batch, mem, config.d_model)), jnp.float32),
    )


def random_params(config: ModelConfig, seed: int = 0) -> dict:
    """Normal(0, 0.2) parameters of XLNetLM(config), without compiling its init."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda s: rng.normal(0.0, 0.2, s.shape).astype(np.float32), param_shapes(config)
    )


def test_init_axes_dropout_and_bfloat16():
    """Real init: logical axes, init distributions; a bfloat16 forward with dropout."""
    config = ModelConfig(**SMALL, d_head=8, untie_r=False, dtype="bfloat16", mem_len=4)
    model, args = XLNetLM(config), _model_inputs(config)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    (logits, new_mems), variables = jax.jit(
        lambda: model.init_with_output(rngs, *args, deterministic=False)
    )()
    specs = nn.get_partition_spec(variables["params"])
    assert specs["layers"]["attention"]["q"] == P("layers", "embed", "heads", "kv")
    assert specs["layers"]["ffn"]["layer_1"]["kernel"] == P("layers", "embed", "mlp")
    assert specs["word_embedding"]["embedding"] == P("vocab", "embed")
    assert specs["rel_biases"]["r_w_bias"] == P("heads", "kv")
    params = nn.unbox(variables["params"])
    assert "rel_biases" not in params["layers"]["attention"]
    assert params["layers"]["attention"]["q"].shape == (2, 32, 4, 8)
    assert params["layers"]["attention"]["q"].dtype == jnp.float32
    assert abs(params["layers"]["attention"]["k"].std() - 0.02) < 0.003
    assert (params["layers"]["ffn"]["layer_norm"]["scale"] == 1).all()
    assert (params["lm_bias"] == 0).all()
    assert logits.dtype == jnp.float32 and new_mems.dtype == jnp.float32
    assert logits.shape == (2, 2, 64) and new_mems.shape == (2, 2, 4, 32)
    assert np.isfinite(np.asarray(logits)).all()


def test_remat_and_unroll_same_gradients_and_depth_same_program():
    """remat and scan_unroll change no gradient; the program does not grow with n_layer."""
    config = ModelConfig(**SMALL, d_head=8, mem_len=4)
    args, params = _model_inputs(config), random_params(config)

    def grad_fn(cfg):
        def loss(p):
            return XLNetLM(cfg).apply({"params": p}, *args, deterministic=True)[0].sum()

        return jax.jit(jax.grad(loss))

    plain = grad_fn(config)(params)
    for variant in (dict(remat=True), dict(scan_unroll=config.n_layer)):
        other = grad_fn(dataclasses.replace(config, **variant))(params)
        # The same math in another fusion/loop order: every leaf differs by reordered sums over
        # at most 64 terms (d_inner), i.e. at most 64 roundings at its scale. Measured: under 5.
        assert_trees_f32_close(other, plain, roundings=64)

    def program_lines(n_layer):
        deep = dataclasses.replace(config, n_layer=n_layer)
        deep_args = _model_inputs(deep)
        forward = jax.jit(
            lambda p: XLNetLM(deep).apply({"params": p}, *deep_args, deterministic=True)
        )
        return forward.lower(param_shapes(deep)).as_text().count("\n")

    assert program_lines(2) == program_lines(6)
