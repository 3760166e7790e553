"""The Pallas relative attention kernel (interpret mode, float32) against the XLA path.

One attention layer (both streams) runs once with the XLA path's dense masks and once with
the kernel's O(B·L) vectors, same params and inputs; outputs must agree within 1e-5 and
the gradients of every param and input within 1e-4 (relative to the largest entry). The
tile is shrunk to 8 so that every case spans several query and key blocks with padding.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlnet_jax import plm
from xlnet_jax.attention import RelativeBiases, TwoStreamRelativeAttention
from xlnet_jax.config import ModelConfig
from xlnet_jax.kernels import masks
from xlnet_jax.kernels import relative_attention as kernel_module
from xlnet_jax.model import _kernel_rows, _stream_rows
from xlnet_jax.position import default_backward_rows, relative_positional_encoding

BASE = ModelConfig(
    vocab_size=32, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32, dropout=0.0, dropatt=0.0
)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    length: int = 13  # not a multiple of the tile (8)
    mem: int = 5
    predict: int = 4
    padded_targets: int = 0  # trailing targets that point at position 0 (weight-0 padding)
    reuse_len: int = 6  # 0: one block (no reuse/new rule)
    bi_data: bool = False
    clamp_len: int = -1
    untie_r: bool = True
    batch: int = 2


CASES = [
    Case("memory_two_segments"),
    Case("no_memory", mem=0),
    Case("bi_data", bi_data=True),
    Case("clamp_len", clamp_len=3, reuse_len=0),
    Case("tied_r", untie_r=False),
    Case("odd_sizes_padded_targets", length=11, mem=7, predict=5, padded_targets=2),
]


def random_order(rng, case: Case) -> tuple[masks.PermOrder, np.ndarray, np.ndarray]:
    """A PLM-like order per row (as plm.sample_plm makes it): (order, seg_ids, target_pos)."""
    batch, length = case.batch, case.length
    ranks = np.full((batch, length), -1)
    is_target = np.zeros((batch, length), bool)
    is_functional = np.zeros((batch, length), bool)
    target_pos = np.zeros((batch, case.predict), np.int32)
    real = case.predict - case.padded_targets
    for b in range(batch):
        is_functional[b, -2:] = True
        targets = np.sort(rng.choice(length - 2, real, replace=False))
        is_target[b, targets] = True
        target_pos[b, :real] = targets
        ordered = is_target[b] | is_functional[b]
        block = (np.arange(length) >= case.reuse_len).astype(int)
        ranks[b] = np.where(ordered, rng.permutation(length) + block * length, -1)
    sample = plm.PLMSample(jnp.asarray(ranks), jnp.asarray(is_target), None, None, None)
    order = plm.perm_order(sample, jnp.asarray(is_functional), case.reuse_len)
    seg_ids = np.zeros((batch, length), np.int32)
    seg_ids[:, length // 2 :] = 1
    seg_ids[:, -1] = 2
    return order, seg_ids, target_pos


def layer_inputs(case: Case, seed: int = 0):
    """(config, params, dense inputs, kernel inputs) of one attention layer."""
    cfg = dataclasses.replace(BASE, bi_data=case.bi_data, clamp_len=case.clamp_len)
    rng = np.random.default_rng(seed)
    order, seg_ids, target_pos = random_order(rng, case)
    batch, length, width = case.batch, case.length, cfg.d_model
    h = jnp.asarray(rng.normal(size=(batch, length, width)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(batch, case.predict, width)), jnp.float32)
    mem = jnp.asarray(rng.normal(size=(batch, case.mem, width)), jnp.float32)
    backward = default_backward_rows(batch) if case.bi_data else None
    pos_emb = relative_positional_encoding(
        case.mem + length, length, width, case.clamp_len, backward
    )
    seg_ids, target_pos = jnp.asarray(seg_ids), jnp.asarray(target_pos)
    dense = _stream_rows(order.dense(), seg_ids, target_pos, case.mem)
    kernel = _kernel_rows(order, seg_ids, target_pos, case.mem)
    shared = None if case.untie_r else RelativeBiases(cfg).init(jax.random.key(1))["params"]
    shared = nn.unbox(shared)
    module = TwoStreamRelativeAttention(cfg, deterministic=True)
    params = nn.unbox(module.init(jax.random.key(0), h, g, mem, pos_emb, *dense, None)["params"])
    if shared is not None:
        del params["rel_biases"]  # the layer then uses the shared ones
    params = jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.5, x.shape), x.dtype), params)
    return module, params, shared, (h, g, mem, pos_emb), dense, kernel


def run_layer(module, params, shared, inputs, rows):
    """(h, g) of the layer; shared holds the untie_r=False biases or None."""
    names = ("r_w_bias", "r_r_bias", "r_s_bias")
    biases = None if shared is None else tuple(shared[n] for n in names)
    return module.apply({"params": params}, *inputs, *rows, biases)


# Unoptimised CPU code: these programs run for milliseconds, XLA's passes would take seconds.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def max_rel_error(got, want) -> float:
    """max |got - want| / max |want| over the non-empty leaves of a pytree."""
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    return max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b))) for a, b in pairs if b.size)


@pytest.fixture
def tile_of_8(monkeypatch):
    monkeypatch.setattr(kernel_module, "TPU_BLOCK", 8)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernel_matches_xla(case, tile_of_8):
    module, params, shared, inputs, dense, kernel = layer_inputs(case)
    cotangent = jax.tree.map(
        lambda x: jnp.asarray(np.random.default_rng(1).normal(size=x.shape), x.dtype),
        run_layer(module, params, shared, inputs, dense),
    )

    def loss_and_out(params, shared, inputs, rows):
        out = run_layer(module, params, shared, inputs, rows)
        loss = sum(jnp.sum(o * c) for o, c in zip(out, cotangent, strict=True))
        return loss, out

    grad = jax.jit(
        jax.grad(loss_and_out, argnums=(0, 1, 2), has_aux=True), compiler_options=FAST_COMPILE
    )
    got_grads, got_out = grad(params, shared, inputs, kernel)
    want_grads, want_out = grad(params, shared, inputs, dense)
    assert max_rel_error(got_out, want_out) < 1e-5
    for name, got, want in zip(("params", "shared", "inputs"), got_grads, want_grads, strict=True):
        if want is not None:
            assert max_rel_error(got, want) < 1e-4, name
