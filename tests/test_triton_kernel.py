"""The Triton (GPU) attention kernel: interpret mode against the XLA path, and CUDA lowering.

The equality tests run test_attention_kernel's layer cases through the Triton kernel
(interpret mode, float32, tiles of 8) with dropatt 0 and 0.1; with dropout both paths draw
their words from the layer's rng (kernels.dropout) and must drop the same entries. The
lowering test exports the tiny-shaped train step for CUDA from this CPU: `auto` must pick
the kernel there (Triton custom calls present), and no float32 [rows, keys]-sized array may
remain; design A's BD (in the compute dtype) is the only score-sized array.
"""

import math
import re

import jax
import pytest

from tests import test_attention_kernel as base
from tests.helpers import small_config
from xlnet_jax.model import xlnet
from xlnet_jax.model.kernels import backends
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.model.kernels.gpu import attention as triton_attention
from xlnet_jax.model.xlnet import uses_kernel
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program


@pytest.fixture
def triton_interpreted(monkeypatch):
    """The Triton kernel in interpret mode, on tiles of 8 (several blocks, with padding)."""
    monkeypatch.setattr(backends, "INTERPRETED", "triton")
    monkeypatch.setattr(triton_attention, "GPU_BLOCK", 8)


@pytest.mark.parametrize("dropatt", [0.0, 0.1])
@pytest.mark.parametrize("case", base.CASES, ids=lambda c: c.name)
def test_triton_kernel_matches_xla(case, dropatt, triton_interpreted):
    """Outputs within 1e-5 and gradients within 1e-4 of the XLA path, both streams; with
    dropatt both paths draw the same words from the layer's rng and drop the same entries."""
    base.assert_kernel_matches_xla(case, dropatt)


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
