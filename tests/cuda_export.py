"""The train step exported for CUDA from a CPU, traced for an H100: the one helper for it.

Every jax we support (0.10.2 to 0.12) lowers the Triton kernel for CUDA without a GPU, but
each wants the chip told its own way:
  - jax >= 0.11 reads the GPU's compute capability at lowering from the abstract mesh's
    device ("No supported GPU devices found, please specify an abstract GPU device"
    otherwise), so the step is traced and lowered under an abstract mesh of the program's
    axes whose device is an H100, as the TPU compile path traces under topology devices;
  - jax 0.10 rejects values made under an abstract mesh other than its inputs' ("Mesh for
    all inputs should be equal") and lowers Triton for sm_90 unasked, so there only the
    chip the kernel dispatch reads (kernels.mesh.target_device) is set to the H100.
Shapes stay abstract: nothing is executed, so a base-sized step exports in seconds.
"""

import contextlib

import jax
import pytest
from jax._src.pallas.triton import pallas_call_registration as _triton_lowering

from xlnet_jax.model import xlnet
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program

H100 = jax.sharding.AbstractDevice(
    device_kind="NVIDIA H100 80GB HBM3", num_cores=None, platform="gpu"
)
# The custom call a Pallas-Triton kernel lowers to from a CPU: jax >= 0.11 names it in
# CUSTOM_CALL_TARGET_NAME, jax 0.10 writes the same name inline.
TRITON_CALL = getattr(_triton_lowering, "CUSTOM_CALL_TARGET_NAME", "__gpu$xla.gpu.triton")
_JAX_READS_THE_ABSTRACT_GPU = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 11)


@contextlib.contextmanager
def traced_for(device, mesh: jax.sharding.Mesh, monkeypatch: pytest.MonkeyPatch):
    """Trace and lower for `device` (an AbstractDevice) on the axes of `mesh` (module doc)."""
    if _JAX_READS_THE_ABSTRACT_GPU:
        abstract = jax.sharding.AbstractMesh(
            mesh.axis_sizes, mesh.axis_names, axis_types=mesh.axis_types,
            abstract_device=device,
        )  # fmt: skip
        with jax.sharding.use_abstract_mesh(abstract):
            yield
        return
    monkeypatch.setattr(kernel_mesh, "target_device", lambda: device)
    monkeypatch.setattr(xlnet, "target_device", lambda: device)
    yield


def export_train_step_for_cuda(config, monkeypatch: pytest.MonkeyPatch) -> jax.export.Exported:
    """`config`'s train step on one device, exported for CUDA and traced for an H100."""
    program = build_program(config, sharding.make_mesh(config, jax.devices()[:1]))
    triton_call = jax.export.DisabledSafetyCheck.custom_call(TRITON_CALL)
    with program.activate(), traced_for(H100, program.mesh, monkeypatch):
        assert kernel_mesh.target_device().platform == "gpu"
        return jax.export.export(
            program.train_step, platforms=["cuda"], disabled_checks=[triton_call]
        )(program.abstract_state, program.abstract_batch)
