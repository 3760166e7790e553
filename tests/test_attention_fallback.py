"""When the attention kernel does not compile for the device: "auto" says so in one line and
trains on the XLA path; "pallas" stops with one ConfigError line.

The step is traced for an H100 (kernels.mesh.target_device, as on a GPU mesh), so "auto"
picks the kernel; the backend is then asked for the interpreted kernel (this CPU cannot
lower the Triton one for real), which is still a `pallas_call`. XLA's compile
of any program holding the kernel (a `pallas_call` in its lowering) then raises what a GPU's
compiler says when a tile overflows the shared memory; a program without it compiles.
"""

import logging

import jax
import numpy as np
import pytest

from tests.helpers import small_config, synthetic_batch
from xlnet_jax.errors import ConfigError
from xlnet_jax.model import xlnet
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program

GPU = jax.sharding.AbstractDevice(
    device_kind="NVIDIA H100 80GB HBM3", num_cores=None, platform="gpu"
)
# Triton's words for a tile that needs more shared memory than the SM has.
SHARED_MEMORY = (
    "INTERNAL: Failed to compile Triton kernel: out of resource: shared memory, Required: "
    "262144, Hardware limit: 232448. Reducing block sizes or `num_stages` may help."
)
OUT_OF_MEMORY = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 81.50GiB."


@pytest.fixture
def kernel_fails(monkeypatch):
    """Traced for an H100; compiling a program that holds the kernel raises `kernel_fails.error`."""
    monkeypatch.setattr(kernel_mesh, "target_device", lambda: GPU)
    monkeypatch.setattr(xlnet, "target_device", lambda: GPU)
    kernel = kernel_mesh.relative_attention

    def interpreted(*args, platform: str, **kwargs):
        return kernel(*args, platform="cpu", **kwargs)

    monkeypatch.setattr(kernel_mesh, "relative_attention", interpreted)
    compile_lowered = jax.stages.Lowered.compile
    failure = type("Failure", (), {"error": SHARED_MEMORY, "kernel_compiles": 0})()

    def compile_or_fail(lowered, *args, **kwargs):
        if "pallas_call" in lowered.as_text(debug_info=True):
            failure.kernel_compiles += 1
            raise jax.errors.JaxRuntimeError(failure.error)
        return compile_lowered(lowered, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_or_fail)
    return failure


def _program(impl: str):
    config = small_config(attention_impl=impl, dropout=0.0)
    return build_program(config, sharding.make_mesh(config, jax.devices()[:1]))


def _losses(program, step_fn, num_steps: int = 2) -> list[float]:
    state, losses = program.init_state(), []
    with program.activate():
        for t in range(num_steps):
            state, metrics = step_fn(state, program.put_batch(synthetic_batch(program.config, t)))
            losses.append(float(metrics["loss"]))
    return losses


def test_auto_trains_on_xla_when_the_kernel_does_not_compile(kernel_fails, caplog):
    program = _program("auto")
    assert xlnet.uses_kernel(program.model.config)
    with caplog.at_level(logging.WARNING, logger="xlnet_jax"):
        step_fn = program.compile_train_step()

    assert kernel_fails.kernel_compiles == 1
    (record,) = [r for r in caplog.records if r.name.startswith("xlnet_jax")]
    message = record.getMessage()
    assert "\n" not in message and "attention_impl='auto'" in message, message
    assert "shared memory" in message and "XLA attention path" in message, message
    # The whole program moved: evaluation too, and the config it reports.
    assert program.config.attention_impl == "xla"
    assert not xlnet.uses_kernel(program.model.config)
    # It trains as a program built for "xla" does, step for step.
    xla = _program("xla")
    np.testing.assert_array_equal(_losses(program, step_fn), _losses(xla, xla.train_step))


def test_pallas_fails_loudly_when_the_kernel_does_not_compile(kernel_fails):
    program = _program("pallas")
    with pytest.raises(ConfigError) as raised:
        program.compile_train_step()
    message = str(raised.value)
    assert "\n" not in message and "attention_impl='pallas'" in message, message
    assert "shared memory" in message and "--config.attention_impl=xla" in message, message
    assert program.config.attention_impl == "pallas"


def test_auto_does_not_hide_other_compile_failures(kernel_fails):
    """Running out of device memory is not the kernel's failure (and the XLA path needs more):
    it surfaces as it is, for `xlnet-jax compile`'s batch search to read."""
    kernel_fails.error = OUT_OF_MEMORY
    program = _program("auto")
    with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
        program.compile_train_step()
    assert program.config.attention_impl == "auto"
