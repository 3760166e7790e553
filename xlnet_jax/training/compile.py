"""`xlnet-jax compile`: AOT-compile the real train step for a TPU topology, from a CPU.

libtpu describes the topology (`jax.experimental.topologies`), the train step is lowered
with the config's mesh and shardings over those devices, and XLA's per-device memory and
FLOP analyses are set against the chip's HBM and peak bf16 rate. Needs libtpu
(`pip install -e '.[tpu]'`). A step that does not fit is followed by a search for the largest
batch_size that does (fit.py).
"""

import contextlib
import dataclasses
import importlib.util
import math
import os
import re
import sys
import tempfile

import ml_collections

from xlnet_jax.config import mesh_shape
from xlnet_jax.errors import MissingDependencyError, XLNetJaxError
from xlnet_jax.model import flops
from xlnet_jax.run.validate import ConfigError, validate_config
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """Per-chip HBM and dense bf16 peak, from the public TPU system-architecture pages."""

    hbm_bytes: int
    peak_tflops: float


CHIPS = {
    "TPU v2": Chip(16 * GIB, 45.0),
    "TPU v3": Chip(32 * GIB, 123.0),
    "TPU v4": Chip(32 * GIB, 275.0),
    "TPU v5 lite": Chip(16 * GIB, 197.0),
    "TPU v5": Chip(95 * GIB, 459.0),
    "TPU v6 lite": Chip(32 * GIB, 918.0),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileReport:
    """What one AOT compile tells about a config on a topology (per device unless named)."""

    topology: str
    num_devices: int
    rows: int  # rows of one micro-batch per data shard (batch_size / grad_accum / shards)
    seq_len: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    peak_bytes: int
    hbm_bytes: int
    xla_flops: float
    model_flops: float
    step_time_at_peak: float
    fits: bool
    error: str = ""

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch per device."""
        return self.rows * self.seq_len


def _chips_in(topology: str, num_slices: int) -> int:
    dims = re.fullmatch(r"[a-z0-9]+:(\d+(?:x\d+)*)", topology)
    if not dims:
        raise ConfigError(
            f'--topology: expected a libtpu name such as "v3:16x16" or "v4:4x4x4" '
            f"(got {topology!r})."
        )
    return math.prod(int(d) for d in dims.group(1).split("x")) * num_slices


def topology_devices(topology: str, num_slices: int = 1):
    """The TPU devices libtpu describes for `topology`, with no TPU attached."""
    if importlib.util.find_spec("libtpu") is None:
        raise MissingDependencyError(
            "compile needs libtpu, which is not installed: pip install -e '.[tpu]' "
            "(or scripts/venv.sh tpu)."
        )
    from jax.experimental import topologies

    # Compiling touches no TPU, so several compiles (tests, other users) may share libtpu.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        desc = topologies.get_topology_desc(
            platform="tpu", topology_name=topology, num_slices=num_slices
        )
    except Exception as e:  # noqa: BLE001 - libtpu's error types are not public
        raise ConfigError(f"--topology {topology!r}: libtpu cannot describe it ({e}).") from None
    return desc.devices


def compile_train_step(config: ml_collections.ConfigDict, topology: str) -> tuple:
    """Lowers and compiles the train step for `topology`; returns (report, compiled or None)."""
    chips = _chips_in(topology, config.num_slices)
    devices = topology_devices(topology, config.num_slices)
    validate_config(config, len(devices))
    chip = CHIPS.get(devices[0].device_kind)
    if chip is None:
        raise ConfigError(f"--topology: unknown chip {devices[0].device_kind!r}.")
    per_chip = len(devices) / chips
    hbm = int(chip.hbm_bytes / per_chip)
    peak = chip.peak_tflops / per_chip * 1e12

    data, fsdp, _ = mesh_shape(config, len(devices))
    shape = dict(
        topology=topology,
        num_devices=len(devices),
        rows=config.batch_size // config.grad_accum_steps // (data * fsdp),
        seq_len=config.seq_len,
        hbm_bytes=hbm,
    )
    program = build_program(config, sharding.make_mesh(config, devices))
    model_flops = flops.train_flops_per_step(config) / len(devices)
    try:
        compiled = program.compile_train_step()
    except Exception as e:  # noqa: BLE001 - XLA reports out-of-memory as a runtime error
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        # libtpu says "Used 20.5G of 15.75G hbm" or "...required for HLO temporaries (202.10G)".
        needed = re.search(r"(?:Used |required[^(]*\()([\d.]+)([GMK])", str(e))
        used = (
            float(needed.group(1)) * {"G": GIB, "M": 2**20, "K": 2**10}[needed.group(2)]
            if needed
            else 0
        )
        report = CompileReport(
            **shape,
            argument_bytes=0,
            output_bytes=0,
            temp_bytes=0,
            peak_bytes=int(used),
            xla_flops=0.0,
            model_flops=model_flops,
            step_time_at_peak=model_flops / peak,
            fits=False,
            error=str(e).splitlines()[0],
        )
        return report, None
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    peak_bytes = getattr(memory, "peak_memory_in_bytes", 0) or (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    report = CompileReport(
        **shape,
        argument_bytes=memory.argument_size_in_bytes,
        output_bytes=memory.output_size_in_bytes,
        temp_bytes=memory.temp_size_in_bytes,
        peak_bytes=int(peak_bytes),
        xla_flops=float(cost.get("flops", 0.0)),
        model_flops=model_flops,
        step_time_at_peak=model_flops / peak,
        fits=peak_bytes <= hbm,
    )
    return report, compiled


def format_duration(seconds: float) -> str:
    """Three significant digits in s, ms or µs: a tiny config's step is not "0.0 ms"."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-6:.3g} µs"


def format_report(r: CompileReport) -> str:
    """The human-readable report; the last line says whether it fits."""
    lines = [
        f"topology {r.topology}: {r.num_devices} devices, {r.hbm_bytes / GIB:.1f} GiB HBM each",
        f"  batch per device {r.rows} rows x {r.seq_len} = {r.tokens:,} tokens (one micro-batch)",
    ]
    if r.argument_bytes or r.temp_bytes:
        lines += [
            f"  arguments {r.argument_bytes / GIB:8.2f} GiB per device",
            f"  outputs   {r.output_bytes / GIB:8.2f} GiB per device",
            f"  temp      {r.temp_bytes / GIB:8.2f} GiB per device",
            f"  peak      {r.peak_bytes / GIB:8.2f} GiB per device",
            f"  XLA FLOPs per step per device      {r.xla_flops:.3e} (scan body counted once)",
        ]
    lines += [
        f"  model FLOPs per step per device    {r.model_flops:.3e} (analytic)",
        f"  roofline step time at 100% / 50% MFU: {format_duration(r.step_time_at_peak)} / "
        f"{format_duration(2 * r.step_time_at_peak)}",
    ]
    hbm = f"{r.hbm_bytes / GIB:.1f} GiB per device"
    if r.fits:
        lines.append(f"fits: {r.peak_bytes / GIB:.2f} GiB <= {hbm}")
    elif r.peak_bytes:
        lines.append(f"does not fit: {r.peak_bytes / GIB:.2f} GiB > {hbm}")
    else:
        lines.append(f"does not fit: XLA ran out of the {hbm} ({r.error})")
    return "\n".join(lines)


@contextlib.contextmanager
def libtpu_log_held():
    """Holds what is written to fd 2 (libtpu logs its environment probes there on every run,
    as E0000 lines); replays it only when an unexpected error escapes the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except (XLNetJaxError, KeyboardInterrupt):  # the CLI's one line is the whole story
            raise
        except BaseException:
            sys.stderr.flush()
            os.dup2(saved, 2)
            held.seek(0)
            os.write(2, held.read())
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
