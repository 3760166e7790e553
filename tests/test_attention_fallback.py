"""When the attention kernel cannot be trusted on the device, "auto" says so in one line and
trains on the XLA path, and "pallas" stops with one ConfigError line: when the kernel does
not compile, and when it compiles but disagrees with the XLA path in the check before the
first step (training/kernel_check.py).

The step is traced for an H100 (kernels.mesh.target_device, as on a GPU mesh), so "auto"
picks the kernel; the backend is then asked for the interpreted kernel (this CPU cannot
lower the Triton one for real), which is still a `pallas_call`. For the compile failures,
XLA's compile of any program holding the kernel (a `pallas_call` in its lowering) raises
what a GPU's compiler says when a tile overflows the shared memory; a program without it
compiles. For the check, the interpreted kernel is made wrong on purpose (a flipped mask, a
dropped 1/sqrt(d_head) scale, a crash).
"""

import logging

import jax
import numpy as np
import pytest

from tests.helpers import synthetic_batch
from tests.train_config import small_config
from xlnet_jax.errors import ConfigError
from xlnet_jax.model import xlnet
from xlnet_jax.model.kernels import masks
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.model.kernels.tpu import tiles as mosaic_tiles
from xlnet_jax.training import kernel_check, sharding
from xlnet_jax.training.program import Program, build_program

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
def traced_for_gpu(monkeypatch, tmp_path):
    """Traced for an H100, the kernel interpreted on this CPU; the check's verdicts go to a
    folder of this test (returned)."""
    monkeypatch.setattr(kernel_mesh, "target_device", lambda: GPU)
    monkeypatch.setattr(xlnet, "target_device", lambda: GPU)
    kernel = kernel_mesh.relative_attention

    def interpreted(*args, platform: str, **kwargs):
        return kernel(*args, platform="cpu", **kwargs)

    monkeypatch.setattr(kernel_mesh, "relative_attention", interpreted)
    verdicts = tmp_path / "verdicts"
    monkeypatch.setenv(kernel_check.CACHE_ENV, str(verdicts))
    return verdicts


@pytest.fixture
def kernel_fails(traced_for_gpu, monkeypatch):
    """Traced for an H100; compiling a program that holds the kernel raises `kernel_fails.error`."""
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


# --------------------------------------------- a kernel that compiles but is wrong on the device


def _flip_the_mask(monkeypatch):
    """Every key a row may see is hidden and every hidden key seen."""
    blocked = masks.blocked
    monkeypatch.setattr(masks, "blocked", lambda *fields: ~blocked(*fields))


def _drop_the_scale(monkeypatch):
    """Scores are no longer divided by sqrt(d_head)."""
    spec = mosaic_tiles.TileSpec
    monkeypatch.setattr(
        mosaic_tiles, "TileSpec", lambda block, scale, *rest: spec(block, 1.0, *rest)
    )


def _crash(monkeypatch):
    """The kernel raises when it is traced, as a lowering failure on the device would."""

    def crash(*args, **kwargs):
        raise RuntimeError("Triton: illegal memory access in xlnet_relative_attention_fwd")

    monkeypatch.setattr(kernel_mesh, "relative_attention", crash)


WRONG_KERNELS = {"flipped mask": _flip_the_mask, "dropped scale": _drop_the_scale}


@pytest.fixture
def step_compiles(monkeypatch):
    """The train step's own compile (the tests above, and test_compile) is skipped: these tests
    are about the check that follows it, and the interpreted kernel compiles slowly."""
    monkeypatch.setattr(Program, "_compile_train_step", lambda self: "the compiled step")


@pytest.fixture
def checks(monkeypatch) -> list:
    """The configs the check ran for (a cached verdict adds none)."""
    ran, run_check = [], kernel_check.run_check

    def counted(config, device):
        ran.append(config)
        return run_check(config, device)

    monkeypatch.setattr(kernel_check, "run_check", counted)
    return ran


def _kernel_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("xlnet_jax")]


def _auto_falls_back(caplog) -> None:
    caplog.clear()
    program = _program("auto")
    with caplog.at_level(logging.WARNING, logger="xlnet_jax"):
        assert program.compile_train_step() == "the compiled step"
    (record,) = _kernel_records(caplog)
    message = record.getMessage()
    assert record.levelno == logging.WARNING and "\n" not in message, message
    assert "attention_impl='auto'" in message and "disagrees with the XLA path" in message
    assert "worst difference" in message and "XLA attention path instead" in message, message
    assert program.config.attention_impl == "xla"
    assert not xlnet.uses_kernel(program.model.config)


def _pallas_refuses(verdicts) -> None:
    program = _program("pallas")
    with pytest.raises(ConfigError) as raised:
        program.compile_train_step()
    message = str(raised.value)
    assert "\n" not in message and "attention_impl='pallas'" in message, message
    assert "disagrees with the XLA path" in message and "worst difference" in message, message
    assert "--config.attention_impl=xla" in message and str(verdicts) in message, message
    assert program.config.attention_impl == "pallas"


@pytest.mark.parametrize(
    ("wrong", "first"), [("flipped mask", "auto"), ("dropped scale", "pallas")]
)
def test_a_wrong_kernel_is_not_trusted(
    traced_for_gpu, step_compiles, checks, monkeypatch, caplog, wrong, first
):
    """auto falls back with one line, pallas refuses; the second of them (a restart) reads
    the cached verdict instead of checking again."""
    WRONG_KERNELS[wrong](monkeypatch)
    for impl in (first, {"auto": "pallas", "pallas": "auto"}[first]):
        if impl == "auto":
            _auto_falls_back(caplog)
        else:
            _pallas_refuses(traced_for_gpu)
    assert len(checks) == 1
    assert checks[0].n_layer == kernel_check.CHECK_LAYERS
    assert checks[0].batch_size == kernel_check.CHECK_ROWS


def test_a_right_kernel_passes_with_one_info_line(traced_for_gpu, step_compiles, checks, caplog):
    for impl, when in (("pallas", "checked in"), ("auto", "checked before")):
        caplog.clear()
        program = _program(impl)
        with caplog.at_level(logging.INFO, logger="xlnet_jax.training.kernel_check"):
            program.compile_train_step()
        (record,) = _kernel_records(caplog)
        message = record.getMessage()
        assert record.levelno == logging.INFO and "\n" not in message, message
        assert "agrees with the XLA path" in message and when in message, message
        (verdict,) = traced_for_gpu.glob("*.json")
        assert str(verdict) in message
        assert program.config.attention_impl == impl
    assert len(checks) == 1


def test_the_check_fails_when_the_kernel_crashes_on_the_device(traced_for_gpu, monkeypatch):
    """A crash in the check is its failure (the step's compile is `kernel_fails`' case)."""
    program = _program("auto")
    _crash(monkeypatch)
    failure = kernel_check.failure(program.config, program.mesh)
    assert failure.startswith("the kernel failed to run: Triton: illegal memory access"), failure
    assert "\n" not in failure


def test_no_check_where_the_kernel_runs_interpreted(checks):
    """On a CPU (no chip patched in) "pallas" runs the interpreted kernel, unchecked."""
    program = _program("pallas")
    assert kernel_check.failure(program.config, program.mesh) is None
    assert checks == []
