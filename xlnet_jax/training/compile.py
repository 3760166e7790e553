"""`xlnet-jax compile`: AOT-compile the real train step for a TPU slice or NVIDIA cards, from
a CPU.

targets.py describes the devices (libtpu for TPU slices, jax's CUDA plugin for cards), the
train step is lowered with the config's mesh and shardings over them, and XLA's per-device
memory and FLOP analyses are set against the device's memory and peak bf16 rate. A step that
does not fit is followed by a search for the largest batch_size that does (fit.py).
"""

import contextlib
import dataclasses
import os
import re
import sys
import tempfile

import ml_collections

from xlnet_jax.config import mesh_shape
from xlnet_jax.errors import XLNetJaxError
from xlnet_jax.hardware.chips import GIB
from xlnet_jax.model import flops
from xlnet_jax.run.validate import validate_config
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program
from xlnet_jax.training.targets import Target, tpu_target


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileReport:
    """What one AOT compile tells about a config on a target (per device unless named)."""

    target: Target
    rows: int  # rows of one micro-batch per data shard (batch_size / grad_accum / shards)
    seq_len: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    peak_bytes: int
    xla_flops: float
    model_flops: float
    step_time_at_peak: float
    fits: bool
    error: str = ""

    @property
    def num_devices(self) -> int:
        return len(self.target.devices)

    @property
    def hbm_bytes(self) -> int:
        return self.target.memory_bytes

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch per device."""
        return self.rows * self.seq_len


def compile_train_step(config: ml_collections.ConfigDict, target: Target | str) -> tuple:
    """Lowers and compiles the train step for `target` (a TPU slice's name is looked up);
    returns (report, compiled or None)."""
    if isinstance(target, str):
        target = tpu_target(target, config.num_slices)
    validate_config(config, len(target.devices))
    if target.xla_attention_only and config.attention_impl == "auto":
        config = config.copy_and_resolve_references()
        config.attention_impl = "xla"
    data, fsdp, _ = mesh_shape(config, len(target.devices))
    shape = dict(
        target=target,
        rows=config.batch_size // config.grad_accum_steps // (data * fsdp),
        seq_len=config.seq_len,
    )
    program = build_program(config, sharding.make_mesh(config, list(target.devices)))
    model_flops = flops.train_flops_per_step(config) / len(target.devices)
    step_time_at_peak = model_flops / target.peak_flops
    try:
        compiled = program.compile_train_step()
    except Exception as e:  # noqa: BLE001 - XLA reports out-of-memory as a runtime error
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return out_of_memory_report(shape, e, model_flops, step_time_at_peak), None
    return memory_report(shape, compiled, model_flops, step_time_at_peak, target), compiled


def out_of_memory_report(shape: dict, error: Exception, model_flops, step_time_at_peak):
    """The report of a compile that ran out of memory, with the peak libtpu names if any.
    `shape`: the report's target, rows and seq_len."""
    # libtpu says "Used 20.5G of 15.75G hbm" or "...required for HLO temporaries (202.10G)".
    needed = re.search(r"(?:Used |required[^(]*\()([\d.]+)([GMK])", str(error))
    used = (
        float(needed.group(1)) * {"G": GIB, "M": 2**20, "K": 2**10}[needed.group(2)]
        if needed
        else 0
    )
    return CompileReport(
        **shape,
        argument_bytes=0,
        output_bytes=0,
        temp_bytes=0,
        peak_bytes=int(used),
        xla_flops=0.0,
        model_flops=model_flops,
        step_time_at_peak=step_time_at_peak,
        fits=False,
        error=str(error).splitlines()[0],
    )


def memory_report(shape: dict, compiled, model_flops, step_time_at_peak, target: Target):
    """The report of a compiled step: XLA's memory and cost analyses against the target."""
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()  # None on the GPU route
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    peak_bytes = getattr(memory, "peak_memory_in_bytes", 0) or (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    return CompileReport(
        **shape,
        argument_bytes=memory.argument_size_in_bytes,
        output_bytes=memory.output_size_in_bytes,
        temp_bytes=memory.temp_size_in_bytes,
        peak_bytes=int(peak_bytes),
        xla_flops=float(cost.get("flops", 0.0)),
        model_flops=model_flops,
        step_time_at_peak=step_time_at_peak,
        fits=peak_bytes <= target.memory_bytes,
    )


def format_duration(seconds: float) -> str:
    """Three significant digits in s, ms or µs: a tiny config's step is not "0.0 ms"."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-6:.3g} µs"


def format_report(r: CompileReport) -> str:
    """The human-readable report. One verdict, on the last line: XLA's peak against the
    device's memory. The other figures are labelled as the parts they are (docs/tpu-pods.md,
    "Reading the compile report")."""
    lines = [
        r.target.description,
        f"  batch per device {r.rows} rows x {r.seq_len} = {r.tokens:,} tokens (one micro-batch)",
        *r.target.notes,
    ]
    if r.argument_bytes or r.temp_bytes:
        lines += [
            "  parts of the peak (each XLA's total; they overlap in time, so they do not add up):",
            f"    arguments {r.argument_bytes / GIB:8.2f} GiB  params, optimizer state, batch",
            f"    outputs   {r.output_bytes / GIB:8.2f} GiB  the new state, mostly written over "
            "the arguments",
            f"    temp      {r.temp_bytes / GIB:8.2f} GiB  every scratch buffer, including "
            "ones never live together",
        ]
    if r.xla_flops:
        lines.append(
            f"  XLA FLOPs per step per device      {r.xla_flops:.3e} (scan body counted once)"
        )
    lines += [
        f"  model FLOPs per step per device    {r.model_flops:.3e} (analytic)",
        f"  roofline step time at 100% / 50% MFU: {format_duration(r.step_time_at_peak)} / "
        f"{format_duration(2 * r.step_time_at_peak)} (a lower bound, not a speed)",
    ]
    memory = f"{r.hbm_bytes / GIB:.1f} GiB per device"
    if r.peak_bytes:
        share = f" ({r.peak_bytes / r.hbm_bytes:.0%})"
        verdict = "fits" if r.fits else "does not fit"
        relation = "<=" if r.fits else ">"
        lines.append(f"{verdict}: peak {r.peak_bytes / GIB:.2f} GiB {relation} {memory}{share}")
    else:
        lines.append(f"does not fit: XLA ran out of the {memory} ({r.error})")
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
