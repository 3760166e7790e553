"""The Pallas relative attention kernel (interpret mode, float32) against the XLA path.

One attention layer (both streams) runs once with the XLA path's dense masks and once with
the kernel's O(B·L) vectors, same params and inputs (and the same dropout rng, so with
dropatt both drop the same entries); outputs must agree within 1e-5 and the gradients of
every param and input within 1e-4 (relative to the largest entry). The tile is shrunk to 8
so that every case spans several query and key blocks with padding.
"""

import dataclasses
import functools
import importlib
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.sharding import Mesh

from tests.helpers import TILES_OF_8
from xlnet_jax.config import DEFAULT_AXIS_RULES, ModelConfig, default_config
from xlnet_jax.model.attention import RelativeBiases, TwoStreamRelativeAttention
from xlnet_jax.model.kernels import masks
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.model.kernels.gpu import attention as triton_attention
from xlnet_jax.model.kernels.tpu import attention as kernel_module
from xlnet_jax.model.kernels.tpu import tiles
from xlnet_jax.model.position import default_backward_rows, relative_positional_encoding
from xlnet_jax.model.xlnet import XLNetLM, _kernel_rows, _stream_rows, uses_kernel
from xlnet_jax.objective import plm
from xlnet_jax.run.validate import ConfigError, validate_config
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program

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


# The dropout rng of every layer run: the kernel and the XLA path draw the same words.
DROPOUT_KEY = jax.random.key(7)


def layer_inputs(case: Case, seed: int = 0, dropatt: float = 0.0):
    """(module, params, shared biases, inputs, dense rows, kernel rows) of one attention
    layer; with dropatt the module drops attention probabilities (not deterministic)."""
    cfg = dataclasses.replace(BASE, bi_data=case.bi_data, clamp_len=case.clamp_len, dropatt=dropatt)
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
    module = module.clone(deterministic=not dropatt)
    if shared is not None:
        del params["rel_biases"]  # the layer then uses the shared ones
    params = jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.5, x.shape), x.dtype), params)
    return module, params, shared, (h, g, mem, pos_emb), dense, kernel


def run_layer(module, params, shared, inputs, rows):
    """(h, g) of the layer; shared holds the untie_r=False biases or None."""
    names = ("r_w_bias", "r_r_bias", "r_s_bias")
    biases = None if shared is None else tuple(shared[n] for n in names)
    return module.apply({"params": params}, *inputs, *rows, biases, rngs={"dropout": DROPOUT_KEY})


def max_rel_error(got, want) -> float:
    """max |got - want| / max |want| over the non-empty leaves of a pytree."""
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    return max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b))) for a, b in pairs if b.size)


@pytest.fixture
def tile_of_8(monkeypatch):
    monkeypatch.setattr(kernel_module, "TPU_BLOCK", 8)
    monkeypatch.setattr(triton_attention, "GPU_TILES", TILES_OF_8)


def assert_kernel_matches_xla(case: Case, dropatt: float = 0.0):
    """One layer's outputs (1e-5) and gradients (1e-4) through the kernel against the XLA path."""
    module, params, shared, inputs, dense, kernel = layer_inputs(case, dropatt=dropatt)
    cotangent = jax.tree.map(
        lambda x: jnp.asarray(np.random.default_rng(1).normal(size=x.shape), x.dtype),
        run_layer(module, params, shared, inputs, dense),
    )

    def loss_and_out(params, shared, inputs, rows):
        out = run_layer(module, params, shared, inputs, rows)
        loss = sum(jnp.sum(o * c) for o, c in zip(out, cotangent, strict=True))
        return loss, out

    grad = jax.jit(jax.grad(loss_and_out, argnums=(0, 1, 2), has_aux=True))
    got_grads, got_out = grad(params, shared, inputs, kernel)
    want_grads, want_out = grad(params, shared, inputs, dense)
    assert max_rel_error(got_out, want_out) < 1e-5
    for name, got, want in zip(("params", "shared", "inputs"), got_grads, want_grads, strict=True):
        if want is not None:
            assert max_rel_error(got, want) < 1e-4, name
    if dropatt:  # the dropout is real: far from the undropped output
        undropped = run_layer(module.clone(deterministic=True), params, shared, inputs, dense)
        assert max_rel_error(undropped, want_out) > 1e-2


@pytest.mark.parametrize("dropatt", [0.0, 0.1])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernel_matches_xla(case, dropatt, tile_of_8):
    assert_kernel_matches_xla(case, dropatt)


@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=lambda c: c.name)
def test_kernel_with_the_barrel_shift_matches_xla(case, tile_of_8, monkeypatch):
    """The shift TPU v2-v4 get (no strided roll there), chosen by the traced-for device kind."""
    monkeypatch.setattr(kernel_mesh, "NO_STRIDED_ROLL", ("cpu",))
    assert_kernel_matches_xla(case)


@pytest.mark.parametrize("strided_roll", [True, False])
@pytest.mark.parametrize("b", [8, 16])
def test_window_shift_and_its_transpose(strided_roll, b):
    """shift_window: out[a, c] = wide[a, b - 1 - a + c]; unshift_window is its transpose."""
    spec = tiles.TileSpec(b, 1.0, b, 0, strided_roll)
    rng = np.random.default_rng(b)
    wide = jnp.asarray(rng.normal(size=(b, 2 * b)), jnp.float32)
    tile = jnp.asarray(rng.normal(size=(b, b)), jnp.float32)

    def kernel(wide_ref, tile_ref, shifted_ref, unshifted_ref):
        shifted_ref[...] = tiles.shift_window(wide_ref[...], spec)
        unshifted_ref[...] = tiles.unshift_window(tile_ref[...])

    shifted, unshifted = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct((b, b), jnp.float32), wide],
        interpret=True,
    )(wide, tile)
    a, c = np.meshgrid(np.arange(b), np.arange(b), indexing="ij")
    np.testing.assert_array_equal(shifted, np.asarray(wide)[a, b - 1 - a + c])
    want = np.zeros((b, 2 * b), np.float32)
    want[a, b - 1 - a + c] = tile
    np.testing.assert_array_equal(unshifted, want)


def test_reuse_block_never_sees_new_block(tile_of_8):
    """Through the kernel, content rows of the reuse block get nothing from the new block."""
    case = CASES[0]
    module, params, _, (h, g, mem, pos_emb), _, kernel = layer_inputs(case)

    def reuse_rows(h):
        return run_layer(module, params, None, (h, g, mem, pos_emb), kernel)[0][:, : case.reuse_len]

    def pull_ones(h):
        out, pullback = jax.vjp(reuse_rows, h)
        return pullback(jnp.ones_like(out))[0]

    d_h = jax.jit(pull_ones)(h)
    influence = np.abs(np.asarray(d_h)).sum(axis=-1)
    assert (influence[:, case.reuse_len :] == 0).all()
    assert (influence[:, : case.reuse_len] > 0).all()


def test_perm_order_is_perm_mask():
    """The kernel's O(B·L) vectors say what plm.perm_mask says, with and without a reuse block."""
    for reuse_len in (0, 6):
        rng = np.random.default_rng(reuse_len)
        case = Case("mask", reuse_len=reuse_len)
        ranks = np.full((case.batch, case.length), -1)
        is_target = rng.random((case.batch, case.length)) < 0.4
        is_functional = np.zeros_like(is_target)
        is_functional[:, -2:] = True
        block = (np.arange(case.length) >= reuse_len) * case.length
        for b in range(case.batch):
            ordered = is_target[b] | is_functional[b]
            ranks[b] = np.where(ordered, rng.permutation(case.length) + block, -1)
        sample = plm.PLMSample(jnp.asarray(ranks), jnp.asarray(is_target), None, None, None)
        is_functional = jnp.asarray(is_functional)
        want = plm.perm_mask(sample, is_functional, reuse_len)
        got = plm.perm_order(sample, is_functional, reuse_len).dense()
        assert want.any() and (~want).any()
        np.testing.assert_array_equal(got, want)


MODEL = dataclasses.replace(BASE, n_layer=2, mem_len=7, reuse_len=6, bi_data=True)


def model_inputs(case: Case, cfg: ModelConfig):
    """(inputs with the dense mask, inputs with the PermOrder, mems) of XLNetLM."""
    rng = np.random.default_rng(3)
    order, seg_ids, target_pos = random_order(rng, case)
    ids = jnp.asarray(rng.integers(0, cfg.vocab_size, (case.batch, case.length)), jnp.int32)
    rest = (jnp.asarray(target_pos),)
    mems = rng.normal(size=(cfg.n_layer, case.batch, case.mem, cfg.d_model))
    mems = jnp.asarray(mems, jnp.float32)
    seg_ids = jnp.asarray(seg_ids)
    return (ids, seg_ids, order.dense(), *rest), (ids, seg_ids, order, *rest), mems


def test_model_through_kernel_matches_xla(tile_of_8):
    """XLNetLM with dropatt 0.1, attention_impl pallas vs xla: logits and new mems within
    1e-5, every param gradient within 1e-4 (two layers, memory, bi_data, two segments, reuse
    block), on a data x tensor mesh of 2 x 2 devices, where the kernel runs per shard of the
    batch and heads, dropout words included."""
    case = Case("model", batch=4, mem=MODEL.mem_len, padded_targets=1)
    dense, compact, mems = model_inputs(case, MODEL)
    xla = dataclasses.replace(MODEL, attention_impl="xla", dropatt=0.1)
    pallas = dataclasses.replace(xla, attention_impl="pallas")
    shapes = jax.eval_shape(
        functools.partial(XLNetLM(MODEL).init, deterministic=True), jax.random.key(0), *dense, mems
    )
    rng = np.random.default_rng(4)
    params = jax.tree.map(
        lambda x: jnp.asarray(rng.normal(0, 0.3, x.shape), jnp.float32), nn.unbox(shapes)
    )

    def run(cfg, inputs):
        def loss(params):
            logits, new_mems = XLNetLM(cfg).apply(
                params, *inputs, mems, deterministic=False, rngs={"dropout": DROPOUT_KEY}
            )
            return jnp.sum(jnp.sin(logits)), (logits, new_mems)

        with sharding.activate(mesh, DEFAULT_AXIS_RULES):
            return jax.jit(jax.grad(loss, has_aux=True))(params)

    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 1, 2), ("data", "fsdp", "tensor"))

    got_grads, got_out = run(pallas, compact)
    want_grads, want_out = run(xla, dense)
    assert max_rel_error(got_out, want_out) < 1e-5
    assert max_rel_error(got_grads, want_grads) < 1e-4


def _avals(jaxpr):
    """Every variable's abstract value in a jaxpr and its sub-jaxprs (scan, pallas, vjp...)."""
    for eqn in jaxpr.eqns:
        yield from (v.aval for v in eqn.outvars)
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                sub = getattr(sub, "jaxpr", sub)
                if isinstance(sub, jax.extend.core.Jaxpr):
                    yield from _avals(sub)


@pytest.mark.parametrize("impl", ["xla", "pallas"])
def test_no_score_sized_array_on_kernel_path(impl, tile_of_8):
    """The jaxpr of the model's gradient has no array with two dims of at least L (a
    [B, Q, K], [B, L, L] or [B, N, L, K + L] score or mask) on the pallas path (the Mosaic
    kernel, interpreted: the backend is chosen before tracing, so the jaxpr holds no other);
    the check finds them on the XLA path."""
    length = 20  # other widths stay below it: d_model, d_inner, heads, d_head, targets
    case = Case("shapes", length=length, mem=MODEL.mem_len)
    cfg = dataclasses.replace(MODEL, attention_impl=impl, d_inner=16)
    dense, compact, mems = model_inputs(case, cfg)
    inputs = compact if impl == "pallas" else dense
    init = functools.partial(XLNetLM(cfg).init, deterministic=True)
    params = jax.eval_shape(init, jax.random.key(0), *inputs, mems)

    def loss(params):
        return jnp.sum(XLNetLM(cfg).apply(params, *inputs, mems, deterministic=True)[0])

    jaxpr = jax.make_jaxpr(jax.grad(loss))(params).jaxpr
    square = {a.shape for a in _avals(jaxpr) if sum(d >= length for d in a.shape) >= 2}
    if impl == "pallas":
        assert square == set()
    else:
        assert (case.batch, cfg.n_head, length, length + case.mem) in square


def test_attention_impl_is_validated_up_front():
    """A wrong name is one ConfigError line; every impl takes attention dropout."""
    config = default_config()
    config.update(attention_impl="flash")
    with pytest.raises(ConfigError, match="config.attention_impl: must be one of"):
        validate_config(config)
    for impl in ("xla", "pallas", "auto"):
        config.update(attention_impl=impl, dropatt=0.1)
        validate_config(config)


@pytest.mark.parametrize("name", ["tiny", "small", "base", "large"])
def test_every_config_takes_auto_which_is_xla_on_this_cpu(name):
    """auto is the default; traced for this CPU it is the XLA path, dropout or not."""
    config = importlib.import_module(f"configs.{name}").get_config()
    assert config.attention_impl == "auto"
    model = ModelConfig.from_config(config)
    assert not uses_kernel(dataclasses.replace(model, dropatt=0.1))


def test_pallas_on_a_mesh_without_a_kernel_backend_is_refused_up_front():
    """TPU and NVIDIA GPUs have a backend; elsewhere (here Apple's Metal plugin) the kernel
    would run interpreted, so build_program refuses."""
    config = default_config()
    config.update(attention_impl="pallas", dropatt=0.0)
    metal = types.SimpleNamespace(platform="METAL", device_kind="Apple M2")
    fake_mesh = types.SimpleNamespace(devices=np.array([metal], dtype=object))
    with pytest.raises(ConfigError, match="attention_impl='pallas'.*interpreted on METAL"):
        build_program(config, fake_mesh)
