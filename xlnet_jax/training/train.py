"""The training loop: mesh, sharded state, streams; step, log, evaluate, checkpoint, resume.

A run in a workdir that already holds checkpoints resumes from the newest intact one, with
its recurrence memory, bit-for-bit: the batch at step t and the step's randomness are pure
functions of (seed, step). SIGTERM and Ctrl-C save at the next step boundary and stop
(preemption.py: the CLI exits 6 or 130, never 0, on a run that stopped short).
"""

import concurrent.futures
import contextlib
import dataclasses
import logging
import time

import jax
import ml_collections

from xlnet_jax import paths
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.config import AUTO_RANGES
from xlnet_jax.data.manifest import Manifest
from xlnet_jax.errors import NonFiniteError
from xlnet_jax.hardware import chips
from xlnet_jax.model import flops
from xlnet_jax.run.fence import Fence
from xlnet_jax.run.heartbeat import Heartbeat
from xlnet_jax.run.init_from import Source, place_params
from xlnet_jax.run.preflight import check_run_from
from xlnet_jax.run.workdir import (
    MIN_FREE_BYTES,
    check_free_space,
    prepare_workdir,
)
from xlnet_jax.training import run_config, sharding, steps
from xlnet_jax.training.evaluate import make_evaluator
from xlnet_jax.training.metrics import MetricsWriter
from xlnet_jax.training.preemption import Preemption
from xlnet_jax.training.profiling import StepProfiler
from xlnet_jax.training.program import build_program
from xlnet_jax.training.progress import ProgressLine

log = logging.getLogger(__name__)


# Under nonfinite_policy='skip', this many skipped steps in a row stop the run: it is not
# learning (e.g. a restored state that itself holds NaN), and would only burn compute.
MAX_SKIPS_IN_A_ROW = 100

# A run whose first FIRST_STEPS steps are all non-finite stops after them, whatever
# log_every is: its config (or restored state) breaks the numerics from the start. A new
# run also stops, rather than save, if a checkpoint falls due before any step was finite:
# that checkpoint would hold the untrained model.
FIRST_STEPS = 10


class _NonFiniteMonitor:
    """Applies config.nonfinite_policy to each step's `nonfinite` code, at log time."""

    def __init__(self, policy: str, start_step: int):
        self.policy = policy
        self.start_step = start_step
        self.in_a_row = 0
        self.any_finite = False

    def due(self, done: int) -> bool:
        """Whether the metrics must be fetched after step `done` for the first-steps check."""
        return not self.any_finite and done == self.start_step + FIRST_STEPS

    def check(self, records: list[dict], last_saved: int | None, save_due: bool = False) -> None:
        """Warns about skipped steps; raises NonFiniteError under 'halt', on a long streak,
        or when no step of this run was finite in its first FIRST_STEPS steps or (for a new
        run) before a save falls due.

        Called before any checkpoint of these steps is saved, so a halt leaves the newest
        checkpoint from before the bad step.
        """
        for record in records:
            code = int(record["nonfinite"])
            if code == steps.FINITE:
                self.in_a_row = 0
                self.any_finite = True
                continue
            quantity, step = steps.NONFINITE_NAMES[code], record["step"]
            newest = f"step {last_saved}" if last_saved else "none yet"
            if self.policy == "halt":
                raise NonFiniteError(
                    f"Non-finite {quantity} at step {step} (nonfinite_policy=halt): its update "
                    f"was not applied and no later checkpoint was saved (newest: {newest}). "
                    "Lower config.learning_rate, or set config.nonfinite_policy=skip to skip "
                    "such steps."
                )
            self.in_a_row += 1
            log.warning(
                "Non-finite %s at step %d: update skipped (%d skipped in this run so far).",
                quantity,
                step,
                int(record["skipped_steps"]),
            )
            if self.in_a_row >= MAX_SKIPS_IN_A_ROW:
                raise NonFiniteError(
                    f"{self.in_a_row} steps in a row up to step {step} were skipped for a "
                    f"non-finite {quantity}: the run is not learning (newest checkpoint: "
                    f"{newest}). Lower config.learning_rate or resume from an earlier "
                    "checkpoint."
                )
        done = records[-1]["step"] - self.start_step
        if not self.any_finite and (done >= FIRST_STEPS or (save_due and not self.start_step)):
            raise NonFiniteError(self._never_finite(done, records[-1]))

    def _never_finite(self, done: int, last: dict) -> str:
        """The error of a run none of whose steps so far was finite, naming likely causes."""
        quantity = steps.NONFINITE_NAMES[int(last["nonfinite"])]
        first = self.start_step + 1
        steps_done = f"step {first}" if done == 1 else f"steps {first}-{first + done - 1}"
        if self.start_step:
            cause = (
                f"the checkpoint of step {self.start_step} it resumed from holds non-finite "
                "values, or config.learning_rate is far too large for it; resume from an "
                "earlier checkpoint or lower the rate"
            )
        else:
            cause = (
                "the config breaks the numerics from the start: config.learning_rate (or "
                "weight_decay) far too large, or config.initializer_range or layer_norm_eps "
                "out of scale; no checkpoint of the untrained model was saved"
            )
        return (
            f"No step of this run was finite ({steps_done}, the last a non-finite {quantity}): "
            f"nothing was learned. Likely cause: {cause}."
        )


def _announce_new_run(workdir: str) -> None:
    """Says a run starts at step 0, loudly if the workdir shows an earlier attempt."""
    metrics = paths.as_path(workdir) / "metrics.jsonl"
    if metrics.exists() and metrics.stat().length:
        log.warning(
            "Starting from step 0 in %s: it holds no checkpoint, but %s has records of an "
            "earlier attempt (stopped before its first checkpoint?); they are replaced.",
            workdir,
            metrics,
        )
    else:
        log.info("Starting a new run in %s", workdir)


def _state_bytes(abstract_state: TrainState) -> int:
    """Bytes of one checkpoint's arrays: the free space a save needs."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_state))


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What the checks before compiling found: the corpus and the params to start from.

    Attributes:
      config: the run's config, data_ranges resolved (run_config.with_data_ranges).
      manifest, fingerprint: the corpus the config names, checked against it.
      source: the params a new run starts from (--init_from), or None.
    """

    config: ml_collections.ConfigDict
    manifest: Manifest
    fingerprint: str
    source: Source | None


def plan_run(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    change_schedule: bool = False,
    init_from: str | None = None,
    allow_version_change: bool = False,
) -> RunPlan:
    """Every check that needs no compiling (`train --dry_run` runs only these).

    config.data_ranges is resolved first (the process count for a new run, the recorded
    number for a resumed one), so the checks and the saved config see the number. A
    resumed run's config may differ from the one saved in WORKDIR/config.json only as
    run_config.check_rerun allows (schedule fields with change_schedule), and its package
    versions from those recorded there only with allow_version_change; the config and
    corpus pass preflight.check_run_from, with a new run's --init_from source, in one round.
    """
    run_config.check_versions(workdir, allow_change=allow_version_change)
    auto_ranges = config.data_ranges == AUTO_RANGES
    config = run_config.with_data_ranges(config, workdir, jax.process_count())
    step = run_config.newest_step(workdir)
    saved = run_config.load(workdir)
    if step is not None and saved is not None:
        line = run_config.check_rerun(saved, config, step, change_schedule=change_schedule)
        if line:
            log.info(line)
    if init_from and step is not None:
        log.info("Resuming from step %d: --init_from %s is not used.", step, init_from)
        init_from = None
    manifest, fingerprint, source = check_run_from(
        config, jax.device_count(), evaluates=config.eval_every > 0, init_from=init_from
    )
    if auto_ranges:  # after the checks: an error stays the command's one line
        resumed = step is not None and saved is not None  # as with_data_ranges decides
        _log_ranges(config.data_ranges, jax.process_count(), resumed=resumed)
    return RunPlan(config, manifest, fingerprint, source)


def _log_ranges(ranges: int, process_count: int, *, resumed: bool) -> None:
    """Says which data_ranges the default gave the run, and why."""
    if resumed:
        log.info("config.data_ranges: %d, as the run recorded it.", ranges)
    elif ranges == process_count:
        log.info("config.data_ranges: %d, the process count (recorded for resumes).", ranges)
    else:
        log.warning(
            "config.data_ranges: %d, not the process count %d, which does not divide the "
            "batch's streams: each process stages and caches 1/%d of the corpus.",
            ranges,
            process_count,
            ranges,
        )


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    change_schedule: bool = False,
    init_from: str | None = None,
    allow_version_change: bool = False,
    profile_steps: str = "",
) -> TrainState:
    """Trains to config.num_train_steps in `workdir`, resuming from its checkpoints.

    Returns the final state. After plan_run's checks, a run whose newest intact checkpoint
    is at num_train_steps says so and returns it without compiling the train step. A new
    run starts from the params at `init_from` when given (see init_from.py); a resumed one
    ignores it. `profile_steps` ("START:END") traces those steps (profiling.py).
    """
    plan = plan_run(
        config,
        workdir,
        change_schedule=change_schedule,
        init_from=init_from,
        allow_version_change=allow_version_change,
    )
    config = plan.config
    profiler = StepProfiler(profile_steps, workdir)
    mesh = sharding.make_mesh(config)
    with sharding.activate(mesh, config.logical_axis_rules):
        try:
            return _train(config, workdir, mesh, plan, profiler)
        finally:
            profiler.stop()


def _train(
    config: ml_collections.ConfigDict, workdir: str, mesh, plan: RunPlan, profiler: StepProfiler
) -> TrainState:
    """The body of train_and_evaluate, traced under the mesh and its logical axis rules."""
    manifest, fingerprint, source = plan.manifest, plan.fingerprint, plan.source
    primary = jax.process_index() == 0
    program = build_program(config, mesh)
    checkpoint_bytes = _state_bytes(program.abstract_state)
    # Each resource is released on any exit, errors included, before the error reaches the
    # user: orbax's threads then add no shutdown noise after the one-line message.
    with contextlib.ExitStack() as cleanup:
        lock = prepare_workdir(workdir, checkpoint_bytes)
        # From here on no write outlives the lease (fence.py). Fence and lock are lifted
        # last, and only once none of `writing` (the saves, the metrics uploads) still writes.
        fence = Fence.around(lock)
        writing = []
        cleanup.callback(fence.release_when_quiet, lock, writing)
        checkpointer = Checkpointer(workdir, config)
        writing.append(checkpointer.writing)
        cleanup.callback(checkpointer.close)
        state = checkpointer.restore(program.abstract_state, config, fingerprint)
        if state is None:
            _announce_new_run(workdir)
            state = program.init_state()
            if source is not None:
                params = place_params(source.params, program.state_shardings.params)
                state = state.replace(params=params)
                log.info(
                    "Starting from the params of the %s %s; the step, optimizer state and "
                    "memory start fresh.",
                    source.kind,
                    source.path,
                )
        elif state.mems is None:
            state = state.replace(mems=program.zero_mems())
        start_step = int(jax.device_get(state.step))
        if primary:
            fence.check()
            run_config.save(workdir, config)
        if start_step >= config.num_train_steps:
            log.info(
                "%s: already complete at step %d; raise --config.num_train_steps (with "
                "--change_schedule) to continue.",
                workdir,
                start_step,
            )
            return state
        if start_step:
            log.info("Resumed from step %d in %s", start_step, workdir)

        train_batcher = program.batcher(manifest.path, "train")
        compile_start = time.time()
        step_fn = program.compile_train_step()
        log.info("Compiled the train step in %.1f s", time.time() - compile_start)

        evaluate = make_evaluator(program, manifest.path) if config.eval_every else None

        # Records past the restored step are of a lost attempt; the run logs them again.
        writer = MetricsWriter(
            workdir,
            enabled=primary,
            drop=lambda record: record.get("step", 0) > start_step,
            sync_wait_s=config.metrics_wait_s,
        )
        writing.append(writer.writing)
        cleanup.callback(writer.close)
        progress = ProgressLine(config.num_train_steps, enabled=primary)
        flops_per_step = flops.train_flops_per_step(config)
        peak_tflops, peak_note = chips.mfu_peak(
            config.peak_tflops_per_device, chips.local_device_kind()
        )
        progress.note(peak_note)
        tokens_per_step = config.batch_size * config.seq_len
        preemption = Preemption()
        cleanup.callback(preemption.restore)
        prefetch = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        cleanup.callback(prefetch.shutdown, wait=False, cancel_futures=True)
        next_batch = prefetch.submit(train_batcher.batch, start_step)
        pending, interval_start = [], time.time()
        monitor = _NonFiniteMonitor(config.nonfinite_policy, start_step)
        heartbeat = Heartbeat()
        last_saved = start_step or None
        for step in range(start_step, config.num_train_steps):
            batch = program.put_batch(next_batch.result())
            if step + 1 < config.num_train_steps:
                next_batch = prefetch.submit(train_batcher.batch, step + 1)
            profiler.before_step(step)
            with jax.transfer_guard("disallow"):
                state, metrics = step_fn(state, batch)
            pending.append(metrics)
            checkpointer.poll()  # a save that ended is reported now, not at the next save
            done = step + 1
            heartbeat.beat()
            profiler.after_step(done, metrics)
            # Steps counted from this run's start: JAX's sync protocol puts the save at one
            # past the highest count reported, so a notice that arrives while a resumed
            # run restores or compiles (count 0) must not point at an absolute step long past.
            stop = preemption.requested(done - start_step)
            save = stop or done % config.checkpoint_every == 0 or done == config.num_train_steps
            # A due save fetches the metrics first: a non-finite step must stop the run
            # before a checkpoint of its state is written.
            if save or done % config.log_every == 0 or monitor.due(done):
                records = jax.device_get(pending)
                elapsed = time.time() - interval_start
                step_time = elapsed / len(records)
                for offset, record in enumerate(records):
                    record["step"] = done - len(records) + offset + 1
                throughput = {
                    "tokens_per_sec": tokens_per_step / step_time,
                    "step_time": step_time,
                    "tflops_per_device": flops_per_step / step_time / jax.device_count() / 1e12,
                }
                throughput["mfu"] = throughput["tflops_per_device"] / peak_tflops
                for record in records:
                    scalars = {k: float(v) for k, v in record.items() if k != "step"}
                    writer.write(record["step"], {**scalars, **throughput})
                progress.update(done, records[-1], throughput)
                pending, interval_start = [], time.time()
                monitor.check(records, last_saved, save_due=save)
            if evaluate is not None and done % config.eval_every == 0:
                result = evaluate(state.params)
                writer.write(done, result, kind="eval")
                progress.note(
                    f"eval at step {done}: loss {result['loss']:.4f}, "
                    f"accuracy {result['accuracy']:.4f}"
                )
                interval_start = time.time()
                heartbeat.beat()
            if save:
                fence.check()
                needed = checkpoint_bytes + MIN_FREE_BYTES
                check_free_space(workdir, needed, f"saving step {done}")
                writer.sync()  # a checkpoint never outruns the metrics a resume keeps
                fence.check()  # the sync may have waited out the lease
                if checkpointer.save(state, make_meta(config, fingerprint, done)):
                    last_saved = done
                heartbeat.beat()
            if stop:
                checkpointer.wait()
                preemption.stop(done, config.num_train_steps, progress.note)
                return state
    return state
