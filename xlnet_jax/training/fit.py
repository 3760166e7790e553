"""What fits: the largest batch_size whose train step fits a target's memory, found by compiling.

`xlnet-jax compile` runs the search when the config's own step does not fit, and
benchmarks/tpu_fit.py runs it for the README's table. Rows per device are powers of two
(even with bi_data); memory grows about linearly with them, so a failed compile's peak
gives the first guess and a few compiles settle it.
"""

import dataclasses
import math
from collections.abc import Callable

import ml_collections

from xlnet_jax.config import mesh_shape
from xlnet_jax.errors import UsageError
from xlnet_jax.training import compile as aot
from xlnet_jax.training import targets
from xlnet_jax.training.targets import Target


@dataclasses.dataclass(frozen=True)
class Try:
    """One compile of the search: a batch_size, its rows per device and its peak memory."""

    batch_size: int
    rows: int
    remat: bool
    peak_bytes: int
    fits: bool

    def describe(self) -> str:
        verdict = "fits" if self.fits else "does not fit"
        peak = f"{self.peak_bytes / aot.GIB:.2f} GiB" if self.peak_bytes else "out of memory"
        return (
            f"  batch_size {self.batch_size} ({self.rows} rows per device, remat="
            f"{self.remat}): {peak}, {verdict}"
        )


def batch_size_for(config: ml_collections.ConfigDict, num_devices: int, rows: int) -> int:
    """The global batch_size that puts `rows` rows per data shard in each micro-batch."""
    data, fsdp, _ = mesh_shape(config, num_devices)
    return rows * data * fsdp * config.grad_accum_steps


def _floor_power_of_two(x: float) -> int:
    return 2 ** max(0, math.floor(math.log2(max(x, 1))))


def largest_fitting_batch(
    config: ml_collections.ConfigDict,
    target: Target,
    *,
    remat: bool,
    limit_rows: int,
    failed: aot.CompileReport | None = None,
    on_try: Callable[[Try], None] = lambda t: None,
    compile_step: Callable = aot.compile_train_step,
) -> tuple[Try | None, list[Try]]:
    """(the largest fitting try or None, every try): rows per device in powers of two up to
    `limit_rows`, each compiled with the config's other fields and the given remat.

    With `failed` (a report that did not fit, with XLA's peak), the search starts from the
    rows that peak scales down to (an upper bound when memory is linear in rows) and halves;
    without, it starts from the fewest rows and doubles. `compile_step` (config, target) ->
    (report, compiled) is pretraining's step unless given (fine-tuning passes its own).
    """
    min_rows = 2 if config.bi_data else 1
    num_devices = len(target.devices)
    tries: dict[int, Try] = {}

    def fits(rows: int) -> bool:
        trial = config.copy_and_resolve_references()
        trial.remat = remat
        trial.batch_size = batch_size_for(config, num_devices, rows)
        report, _ = compile_step(trial, target)
        tries[rows] = Try(trial.batch_size, rows, remat, report.peak_bytes, report.fits)
        on_try(tries[rows])
        return report.fits

    rows = min_rows
    if failed is not None and failed.peak_bytes:
        rows = _floor_power_of_two(failed.rows * failed.hbm_bytes / failed.peak_bytes)
    rows = max(min_rows, min(rows, _floor_power_of_two(limit_rows)))
    if fits(rows):
        while rows * 2 <= limit_rows and fits(rows * 2):
            rows *= 2
        return tries[rows], list(tries.values())
    while rows // 2 >= min_rows:
        rows //= 2
        if fits(rows):
            return tries[rows], list(tries.values())
    return None, list(tries.values())


def what_fits(
    config: ml_collections.ConfigDict,
    report: aot.CompileReport,
    compile_step: Callable = aot.compile_train_step,
) -> list[str]:
    """Searches after `report` did not fit; the lines that say which batch_size fits and what
    else would help (only switches that are not on already), with each try as it compiles."""
    print(
        f"searching the largest batch_size that fits on {report.target.name} (remat="
        f"{config.remat}{', already on' if config.remat else ''}; one compile per try):",
        flush=True,
    )
    show = lambda t: print(t.describe(), flush=True)  # noqa: E731 - progress of a slow search
    lines = []
    below = max(report.rows - 1, 1)
    best, _ = largest_fitting_batch(
        config, report.target, remat=config.remat, limit_rows=below, failed=report,
        on_try=show, compile_step=compile_step,
    )  # fmt: skip
    lines.append(_verdict(config, report, best))
    if not config.remat:  # the no-remat peak scales to a first guess that remat beats
        with_remat, _ = largest_fitting_batch(
            config, report.target, remat=True, limit_rows=report.rows, failed=report,
            on_try=show, compile_step=compile_step,
        )  # fmt: skip
        if with_remat is not None:
            lines.append(
                f"with --config.remat=True: --config.batch_size={with_remat.batch_size} "
                f"({with_remat.rows} rows per device) fits"
            )
    data, fsdp, _ = mesh_shape(config, report.num_devices)
    if fsdp == 1 and data > 1:
        lines.append(
            "or shard params and optimizer state over the slice with --config.mesh_fsdp=-1 "
            "--config.mesh_data=1 (not compiled)"
        )
    return lines


def _verdict(config, report: aot.CompileReport, best: Try | None) -> str:
    if best is None:
        return (
            f"no batch fits on {report.target.name}: even the fewest rows per device need more "
            f"than {report.hbm_bytes / aot.GIB:.1f} GiB"
        )
    tokens = best.rows * config.seq_len
    line = (
        f"largest that fits: --config.batch_size={best.batch_size} ({best.rows} rows x "
        f"{config.seq_len} = "
        f"{tokens:,} tokens per device, {best.peak_bytes / aot.GIB:.2f} GiB)"
    )
    if config.batch_size % best.batch_size == 0:
        accum = config.grad_accum_steps * config.batch_size // best.batch_size
        line += (
            f"; to keep batch_size {config.batch_size}, pass --config.grad_accum_steps={accum} "
            "instead (the same rows per micro-batch; not compiled: accumulating adds a "
            "params-sized gradient buffer)"
        )
    return line


def compile_for(
    config: ml_collections.ConfigDict, *, topology: str | None, gpu: str | None, save=None
) -> int:
    """The CLI body: compile for the TPU slice `topology` or the cards `gpu`, print the
    report (and, when it does not fit, what does); optionally serialize. libtpu's and the
    CUDA plugin's own logs are held back unless the compile breaks.
    Exit 0 iff the config's step fits, 3 if not."""
    if (topology is None) == (gpu is None):
        raise UsageError("compile: give one of --topology (a TPU slice) or --gpu (NVIDIA cards).")
    with aot.libtpu_log_held():
        target = targets.tpu_target(topology, config.num_slices) if topology else None
        target = target or targets.gpu_target(gpu)
        report, compiled = aot.compile_train_step(config, target)
        print(aot.format_report(report), flush=True)
        if not report.fits:
            print("\n".join(what_fits(config, report)))
    if save and compiled is not None:
        from jax.experimental import serialize_executable

        payload, _, _ = serialize_executable.serialize(compiled)
        with open(save, "wb") as f:
            f.write(payload)
        print(f"saved the executable to {save}")
    return 0 if report.fits else 3
