"""The whole base train step compiled for an H100 through XLA's GPU pipeline, from a CPU.

Runs in its own CI leg (scripts/test_gpu_compile.sh), with jax's CUDA plugin on its path,
which the main suite must not see. `aot_devices.gpu_target` describes the card from the chip
table's facts, with no GPU; XLA's GPU compiler then compiles the step, the Triton attention
kernels included (XLA checks their shared memory against the card), to a cubin, and plans
its memory. `python -m tests_gpu.test_h100_step` prints the figures of docs/gpus.md.
"""

import sys

import pytest

from configs.base import get_config as base_config
from xlnet_jax.hardware.chips import GIB
from xlnet_jax.training import aot, aot_devices

BATCH = 16  # issue 15's measured H100 step: base width, batch 16, bf16
TRITON = "xlnet_relative_attention_triton"  # our kernels; XLA's own GEMM fusions are __triton*


def compile_base(attention_impl: str):
    config = base_config()
    config.update(batch_size=BATCH, attention_impl=attention_impl)
    return aot.compile_train_step(config, aot_devices.gpu_target("h100-80gb"))


@pytest.fixture(scope="module")
def kernel():
    return compile_base("auto")  # what a user on an H100 gets: the Triton kernel


@pytest.fixture(scope="module")
def xla():
    return compile_base("xla")


def test_the_kernel_path_compiles_with_its_triton_calls(kernel):
    report, compiled = kernel
    assert compiled is not None and report.fits
    assert compiled.as_text().count(TRITON) >= 2  # forward and backward, at least
    assert report.target.devices[0].device_kind == "NVIDIA H100 80GB HBM3"


def test_the_xla_path_compiles_without_triton_and_needs_more_memory(kernel, xla):
    report, compiled = xla
    assert compiled is not None and report.fits
    assert TRITON not in compiled.as_text()
    assert kernel[0].peak_bytes < report.peak_bytes


if __name__ == "__main__":
    for impl in sys.argv[1:] or ["auto", "xla"]:
        r, _ = compile_base(impl)
        print(
            f"base B{BATCH} attention_impl={impl}: peak {r.peak_bytes / GIB:.2f} GiB, "
            f"temp {r.temp_bytes / GIB:.2f}, arguments {r.argument_bytes / GIB:.2f}",
            flush=True,
        )
