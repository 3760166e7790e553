"""The Triton (GPU) attention kernel: interpret mode against the XLA path, and CUDA lowering.

The equality tests run test_attention_kernel's layer cases through the Triton kernel
(interpret mode, float32, tiles of 8) with dropatt 0 and 0.1. With dropout both paths must
drop the same entries: both get fixed words per stream, and the XLA path's probabilities go
through `dropout.dense_keep` with them. The lowering test exports the tiny-shaped train step
for CUDA from this CPU: `auto` must pick the kernel there (Triton custom calls present), and
no float32 [rows, keys]-sized array may remain; design A's BD (in the compute dtype) is the
only score-sized array.
"""

import dataclasses
import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from tests import test_attention_kernel as base
from tests.helpers import small_config
from xlnet_jax.model import attention, xlnet
from xlnet_jax.model.kernels import backends, dropout, triton_attention
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.model.xlnet import uses_kernel
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program

DROPATT = 0.1


@pytest.fixture
def triton_interpreted(monkeypatch):
    """The Triton kernel in interpret mode, on tiles of 8 (several blocks, with padding)."""
    monkeypatch.setattr(backends, "INTERPRETED", "triton")
    monkeypatch.setattr(triton_attention, "GPU_BLOCK", 8)


def stream_words(num_rows: int, batch: int, heads: int) -> jax.Array:
    """Fixed dropout words of the stream with `num_rows` rows (the test cases' two streams
    differ in rows), the same for both paths."""
    return dropout.row_head_words(jax.random.key(num_rows), batch, heads)


class KeyedDropout(nn.Module):
    """nn.Dropout as the XLA path will draw dropatt: dense_keep with the stream's words."""

    rate: float

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        if deterministic or self.rate == 0:
            return x
        assert x.ndim == 4, "only attention probabilities [B, N, Q, K] are dropped here"
        batch, heads, rows, keys = x.shape
        keep = dropout.dense_keep(stream_words(rows, batch, heads), rows, keys, self.rate)
        return jnp.where(keep, x / (1 - self.rate), 0.0)


def with_stream_words(fn):
    """sharded_relative_attention with the stream's fixed words in place of the drawn ones."""

    def attend(q, k, v, k_r, biases, seg_embed, row, key, positions, words, rate):
        words = stream_words(q.shape[1], *words.shape)
        return fn(q, k, v, k_r, biases, seg_embed, row, key, positions, words, rate)

    return attend


@pytest.mark.parametrize("dropatt", [0.0, DROPATT])
@pytest.mark.parametrize("case", base.CASES, ids=lambda c: c.name)
def test_triton_kernel_matches_xla(case, dropatt, triton_interpreted, monkeypatch):
    """Outputs within 1e-5 and gradients within 1e-4 of the XLA path, both streams."""
    module, params, shared, inputs, dense, kernel = base.layer_inputs(case)
    if dropatt:
        assert case.predict != case.length  # the streams' words differ by their row counts
        module = module.clone(config=dataclasses.replace(module.config, dropatt=dropatt))
        module = module.clone(deterministic=False)
        monkeypatch.setattr(nn, "Dropout", KeyedDropout)
        monkeypatch.setattr(
            attention, "sharded_relative_attention",
            with_stream_words(attention.sharded_relative_attention),
        )  # fmt: skip
    rngs = {"dropout": jax.random.key(7)}
    run = functools.partial(module.apply, rngs=rngs)
    names = ("r_w_bias", "r_r_bias", "r_s_bias")
    biases = None if shared is None else tuple(shared[n] for n in names)
    cotangent = jax.tree.map(
        lambda x: jnp.asarray(jax.random.normal(jax.random.key(1), x.shape), x.dtype),
        run({"params": params}, *inputs, *dense, biases),
    )

    def loss_and_out(params, shared, inputs, rows):
        biases = None if shared is None else tuple(shared[n] for n in names)
        out = run({"params": params}, *inputs, *rows, biases)
        return sum(jnp.sum(o * c) for o, c in zip(out, cotangent, strict=True)), out

    grad = jax.jit(
        jax.grad(loss_and_out, argnums=(0, 1, 2), has_aux=True),
        compiler_options=base.FAST_COMPILE,
    )
    got_grads, got_out = grad(params, shared, inputs, kernel)
    want_grads, want_out = grad(params, shared, inputs, dense)
    assert base.max_rel_error(got_out, want_out) < 1e-5
    for name, got, want in zip(("params", "shared", "inputs"), got_grads, want_grads, strict=True):
        if want is not None:
            assert base.max_rel_error(got, want) < 1e-4, name


# Every dimension distinct, so that a shape says what it is: rows L = 24 and P = 5 (padded
# by tiles of 32 to 32), keys K = 44, K + L = 68 (padded: 64, and BD's width L + 64 = 88).
LOWERED = dict(seq_len=24, reuse_len=12, mem_len=20, perm_size=12, num_predict=5, d_model=40,
               n_head=2, d_head=8, d_inner=56, batch_size=4, dtype="bfloat16")  # fmt: skip
ROW_DIMS, KEY_DIMS = {24, 5, 32}, {44, 68, 64, 88}
GPU = jax.sharding.AbstractDevice(
    device_kind="NVIDIA H100 80GB HBM3", num_cores=None, platform="gpu"
)


def score_sized(module_text: str) -> set[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of every float array of the module with a row and a key dimension."""
    found = set()
    for match in re.finditer(r"tensor<((?:\d+x)+)(f32|bf16|f16)>", module_text):
        dims = tuple(int(d) for d in match.group(1).rstrip("x").split("x"))
        if ROW_DIMS & set(dims) and KEY_DIMS & set(dims) and math.prod(dims) >= 4 * 2 * 5 * 44:
            found.add((dims, match.group(2)))
    return found


def export_train_step_for_cuda(impl: str, monkeypatch) -> str:
    """The MLIR text of the train step exported for CUDA, traced for an H100: the chip the
    step is traced for (kernels.mesh.target_device) says GPU, as it does on a GPU mesh."""
    monkeypatch.setattr(kernel_mesh, "target_device", lambda: GPU)
    monkeypatch.setattr(xlnet, "target_device", lambda: GPU)
    config = small_config(attention_impl=impl, **LOWERED)
    program = build_program(config, sharding.make_mesh(config, jax.devices()[:1]))
    assert uses_kernel(program.model.config) == (impl == "auto")
    triton_call = jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")
    with program.activate():
        exported = jax.export.export(
            program.train_step, platforms=["cuda"], disabled_checks=[triton_call]
        )(program.abstract_state, program.abstract_batch)
    return exported.mlir_module()


def test_train_step_exported_for_cuda_runs_the_triton_kernel(monkeypatch):
    """`auto` with dropatt traced for a GPU: Triton calls (forward and both backward kernels
    of each stream, in the scanned layer), no float32 score-sized array; BD (bf16, one per
    stream, [B, N, rows padded, L + keys padded]) is the only score-sized array."""
    monkeypatch.setattr(triton_attention, "GPU_BLOCK", 32)
    text = export_train_step_for_cuda("auto", monkeypatch)
    assert text.count("__gpu$xla.gpu.triton") >= 6
    for name in ("fwd", "bwd_rows", "bwd_keys"):
        assert f"xlnet_relative_attention_triton_{name}" in text
    assert score_sized(text) == {((4, 2, 32, 88), "bf16")}


def test_the_score_check_finds_the_xla_path_scores(monkeypatch):
    """The same export on the XLA path holds float32 [B, N, L, K] scores: the check sees them."""
    text = export_train_step_for_cuda("xla", monkeypatch)
    assert "__gpu$xla.gpu.triton" not in text
    assert ((4, 2, 24, 44), "f32") in score_sized(text)
