"""The GPU kernel compiled for Hopper (sm_90) without a GPU: the kernel's profiler until one runs.

The real train step (base and large, batch 16, bf16, dropatt 0.1) is exported for CUDA,
traced for an H100 (tests.cuda_export). Each Triton custom call carries its kernel's Triton
IR and launch parameters; every distinct kernel is compiled to PTX with the `triton` package
(the stand-in for the Triton inside XLA's CUDA plugin) and assembled by its `ptxas -v`,
which reports registers and spills. Asserted per kernel: it compiles, every dot is a
warpgroup MMA (wgmma, none of Ampere's mma.sync), no spill bytes, shared memory within an
H100's 227 KB per block, and no scalar 2-byte global load or store: the skewed positional
tile and its gradient move as vectors, like every other bf16 tile.

`python -m tests.test_gpu_compile base large` prints the same figures as a table
(docs/kernel-gpu.md).
"""

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import tempfile

import pytest
import triton  # in the test extra: the suite fails, not skips, without it
from jax._src.interpreters import mlir as jax_mlir
from jax._src.lib import triton as jax_triton
from jax._src.lib.mlir import ir
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas

from tests.cuda_export import TRITON_CALL, export_train_step_for_cuda
from tests.test_triton_kernel import exported_config

H100 = GPUTarget("cuda", 90, 32)
SHARED_PER_BLOCK = 227 * 1024  # an H100's largest shared memory per block (opt-in)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One Triton custom call of an exported step: its name, IR and launch parameters."""

    name: str
    ir: bytes  # MLIR bytecode of the Triton IR
    num_warps: int
    num_stages: int
    programs: int  # along the grid's first axis: query blocks (forward, rows) or key blocks


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What sm_90 machine code of one kernel says (from its PTX and ptxas -v)."""

    registers: int
    spill_bytes: int
    shared_bytes: int
    wgmma: int
    mma_sync: int
    scalar_b16_loads: int
    scalar_b16_stores: int
    vector_loads: int
    async_copies: int


def triton_kernels(module_text: str) -> list[Kernel]:
    """The distinct Triton kernels of an exported module (identical calls listed once)."""
    found: dict[str, Kernel] = {}
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(module_text)

        def visit(op):
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        attrs = inner.operation.attributes
                        if inner.operation.name == "stablehlo.custom_call" and (
                            ir.StringAttr(attrs["call_target_name"]).value == TRITON_CALL
                        ):
                            config = ir.DictAttr(attrs["mhlo.backend_config"])
                            kernel = Kernel(
                                ir.StringAttr(config["name"]).value,
                                ir.StringAttr(config["ir"]).value_bytes,
                                ir.IntegerAttr(config["num_warps"]).value,
                                ir.IntegerAttr(config["num_stages"]).value,
                                ir.IntegerAttr(config["grid_x"]).value,
                            )
                            found.setdefault(_key(kernel), kernel)
                        visit(inner.operation)

        visit(module.operation)
    return list(found.values())


def _key(kernel: Kernel) -> str:
    launch = f"{kernel.num_warps},{kernel.num_stages}".encode()
    return hashlib.sha256(kernel.ir + launch).hexdigest()


def _count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))


_CACHE: dict[str, Compiled] = {}


def compile_for_hopper(kernel: Kernel) -> Compiled:
    """`kernel` compiled for sm_90 (cached by IR and launch parameters within the run)."""
    key = _key(kernel)
    if key in _CACHE:
        return _CACHE[key]
    with jax_mlir.make_ir_context() as context:
        jax_triton.dialect.register_dialect(context)
        text = ir.Module.parse(kernel.ir).operation.get_asm(enable_debug_info=False)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, f"{kernel.name}.ttir")
        with open(path, "w") as f:
            f.write(text)
        options = dict(num_warps=kernel.num_warps, num_stages=kernel.num_stages)
        with pytest.MonkeyPatch.context() as env:  # triton's cache: this run's only
            env.setenv("TRITON_CACHE_DIR", os.path.join(work, "cache"))
            compiled = triton.compile(path, target=H100, options=options)
        ptx = compiled.asm["ptx"]
        with open(os.path.join(work, "kernel.ptx"), "w") as f:
            f.write(ptx)
        report = subprocess.run(
            [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", "kernel.ptx", "-o", "kernel.cubin"],
            cwd=work, capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", report)
    result = Compiled(
        registers=int(registers.group(1)),
        spill_bytes=sum(int(s) for s in spills),
        shared_bytes=compiled.metadata.shared,
        wgmma=_count(r"wgmma\.mma_async", ptx),
        mma_sync=_count(r"\bmma\.sync", ptx),
        scalar_b16_loads=_count(r"ld\.global(?:\.[a-z_]+)*\.[bu]16\b", ptx),
        scalar_b16_stores=_count(r"st\.global(?:\.[a-z_]+)*\.[bu]16\b", ptx),
        vector_loads=_count(r"ld\.global(?:\.[a-z_]+)*\.v[248]\.", ptx),
        async_copies=_count(r"cp\.async\.c[ag]\.", ptx),
    )
    _CACHE[key] = result
    return result


def compiled_step(name: str, monkeypatch) -> list[tuple[Kernel, Compiled]]:
    """configs/`name`'s train step (batch 16, bf16, dropatt 0.1), its kernels compiled."""
    exported = export_train_step_for_cuda(exported_config(name), monkeypatch)
    return [(k, compile_for_hopper(k)) for k in triton_kernels(exported.mlir_module())]


@pytest.mark.parametrize("name", ["base", "large"])
def test_every_kernel_compiles_lean_for_hopper(name, monkeypatch):
    kernels = compiled_step(name, monkeypatch)
    # forward, rows backward and keys backward of each of the two streams
    assert len(kernels) == 6, [k.name for k, _ in kernels]
    for kernel, c in kernels:
        where = f"{name} {kernel.name}: {c}"
        assert c.wgmma > 0 and c.mma_sync == 0, where
        assert c.spill_bytes == 0, where
        assert c.shared_bytes <= SHARED_PER_BLOCK, where
        assert c.scalar_b16_loads == 0 and c.scalar_b16_stores == 0, where
        assert c.vector_loads + c.async_copies > 0, where


def _table(names: list[str]) -> None:
    """Prints each kernel's figures (markdown), for docs/kernel-gpu.md."""
    monkeypatch = pytest.MonkeyPatch()
    fields = [f.name for f in dataclasses.fields(Compiled)]
    print("| shape | kernel | programs | warps | stages | " + " | ".join(fields) + " |")
    print("|" + "---|" * (5 + len(fields)))
    for name in names:
        for kernel, c in compiled_step(name, monkeypatch):
            values = [str(getattr(c, f)) for f in fields]
            launch = (kernel.programs, kernel.num_warps, kernel.num_stages)
            row = [name, kernel.name, *(str(x) for x in launch), *values]
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    _table(sys.argv[1:] or ["base", "large"])
