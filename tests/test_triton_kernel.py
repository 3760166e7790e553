"""The Triton (GPU) attention kernel: interpret mode against the XLA path, and CUDA lowering.

The equality tests run test_attention_kernel's layer cases through the Triton kernel
(interpret mode, float32, tiles of 8) with dropatt 0 and 0.1; with dropout both paths draw
their words from the layer's rng (kernels.dropout) and must drop the same entries. The
lowering tests export the train step for CUDA from this CPU, traced for an H100
(tests.cuda_export), at the tiny shape and at base batch 16: `auto` must pick the kernel
there (Triton custom calls present), and no float32 score-sized array may remain (BD, in
the compute dtype, is the kernel path's only score-sized array).
"""

import importlib
import math
import re

import pytest

from tests import test_attention_kernel as base
from tests.cuda_export import TRITON_CALL, export_train_step_for_cuda
from tests.helpers import TILES_OF_8
from xlnet_jax.config import default_config
from xlnet_jax.model.kernels import backends
from xlnet_jax.model.kernels.gpu import attention as triton_attention


@pytest.fixture
def triton_interpreted(monkeypatch):
    """The Triton kernel in interpret mode, on tiles of 8 (several blocks, with padding)."""
    monkeypatch.setattr(backends, "INTERPRETED", "triton")
    monkeypatch.setattr(triton_attention, "GPU_TILES", TILES_OF_8)


@pytest.mark.parametrize("dropatt", [0.0, 0.1])
@pytest.mark.parametrize("case", base.CASES, ids=lambda c: c.name)
def test_triton_kernel_matches_xla(case, dropatt, triton_interpreted):
    """Outputs within 1e-5 and gradients within 1e-4 of the XLA path, both streams; with
    dropatt both paths draw the same words from the layer's rng and drop the same entries."""
    base.assert_kernel_matches_xla(case, dropatt)


def exported_config(name: str, **overrides):
    """configs/`name` at batch 16 (default: the package default, the tiny shape of B 4, N 4,
    L 128, memory 64), bf16 with dropatt 0.1, as exported for CUDA by the tests."""
    if name == "default":
        config, batch = default_config(), 4
        config.mem_len = 64
    else:
        config, batch = importlib.import_module(f"configs.{name}").get_config(), 16
    for field, value in dict(batch_size=batch, dtype="bfloat16", dropatt=0.1, **overrides).items():
        config[field] = value
    return config


def score_sized_f32(module_text: str, config) -> set[tuple[int, ...]]:
    """Shapes of the module's float32 arrays as large as one stream's scores: a batch axis,
    a head axis, a query axis (>= the P target rows; not the head width, which [B, N, K, H]
    arrays have) and a key axis (>= K = M + L), and
    B·N·P·K elements or more (stacks of them, per layer or per stream, included)."""
    batch, heads, rows = config.batch_size, config.n_head, config.num_predict
    keys = config.mem_len + config.seq_len
    found = set()
    for match in re.finditer(r"tensor<((?:\d+x)+)f32>", module_text):
        dims = tuple(int(d) for d in match.group(1).rstrip("x").split("x"))
        rest = list(dims)
        for axis in (batch, heads):
            if axis in rest:
                rest.remove(axis)
        if len(rest) != len(dims) - 2:
            continue
        long_axes = sorted(d for d in rest if d >= rows and d != config.d_head)
        big = math.prod(dims) >= batch * heads * rows * keys
        if big and len(long_axes) >= 2 and long_axes[-1] >= keys:
            found.add(dims)
    return found


@pytest.mark.parametrize("name", ["default", "base"])
def test_train_step_exported_for_cuda_runs_the_triton_kernel(name, monkeypatch):
    """`auto` with dropatt traced for an H100: the Triton kernels (forward and both backward
    kernels of each stream, in the scanned layer) and no float32 score-sized array, at the
    tiny shape and at base batch 16 (abstract shapes: nothing runs)."""
    config = exported_config(name)
    text = export_train_step_for_cuda(config, monkeypatch).mlir_module()
    assert text.count(TRITON_CALL) >= 6
    for kernel in ("fwd", "bwd_rows", "bwd_keys"):
        assert f"xlnet_relative_attention_triton_{kernel}" in text
    assert score_sized_f32(text, config) == set()


def test_the_score_check_finds_the_xla_path_scores(monkeypatch):
    """The same tiny export on the XLA path holds float32 [B, N, L, K] scores: the check
    sees them."""
    config = exported_config("default", attention_impl="xla")
    text = export_train_step_for_cuda(config, monkeypatch).mlir_module()
    assert TRITON_CALL not in text
    keys = config.mem_len + config.seq_len
    assert (4, 4, config.seq_len, keys) in score_sized_f32(text, config)
