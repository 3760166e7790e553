"""Pretraining: the checks before compiling (plan_run), and the PLM program the loop runs.

The loop (loop.py) owns the workdir, checkpoints, resume, signals and records. A run in a
workdir that already holds checkpoints resumes from the newest intact one, with its
recurrence memory, bit-for-bit: the batch at step t and the step's randomness are pure
functions of (seed, step). SIGTERM and Ctrl-C save at the next step boundary and stop
(preemption.py: the CLI exits 6 or 130, never 0, on a run that stopped short).
"""

import dataclasses
import logging

import jax
import ml_collections

from xlnet_jax import paths
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.config import AUTO_RANGES
from xlnet_jax.data.manifest import Manifest
from xlnet_jax.model import flops
from xlnet_jax.run.init_from import Source, place_params
from xlnet_jax.run.preflight import check_run_from
from xlnet_jax.training import loop, run_config, sharding
from xlnet_jax.training.evaluate import make_evaluator
from xlnet_jax.training.program import Program, build_program

log = logging.getLogger(__name__)


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
    mesh = sharding.make_mesh(plan.config)
    with sharding.activate(mesh, plan.config.logical_axis_rules):
        program = build_program(plan.config, mesh)
        return loop.run(PretrainRun(program, plan, workdir), workdir, profile_steps=profile_steps)


class PretrainRun:
    """Pretraining as the loop's program (loop.LoopProgram): the PLM step on the corpus's
    streams, the held-out evaluation, params from --init_from for a new run."""

    def __init__(self, program: Program, plan: RunPlan, workdir: str):
        self.program, self.plan, self.workdir = program, plan, workdir
        self.config = program.config
        self.abstract_state = program.abstract_state
        self.fingerprint = plan.fingerprint
        self.tokens_per_step = self.config.batch_size * self.config.seq_len
        self.flops_per_device = flops.train_flops_per_step(self.config) / jax.device_count()
        self._batcher = self._evaluate = None  # compile_train_step makes them

    def activate(self):
        return self.program.activate()

    def start_state(self, restored: TrainState | None) -> TrainState:
        if restored is not None:  # a run of mem_len 0 saves no memory item
            return (
                restored
                if restored.mems is not None
                else restored.replace(mems=self.program.zero_mems())
            )
        _announce_new_run(self.workdir)
        state = self.program.init_state()
        source = self.plan.source
        if source is None:
            return state
        params = place_params(source.params, self.program.state_shardings.params)
        log.info(
            "Starting from the params of the %s %s; the step, optimizer state and memory "
            "start fresh.",
            source.kind,
            source.path,
        )
        return state.replace(params=params)

    def on_start(self, workdir: str) -> None:
        pass

    def compile_train_step(self):
        step = self.program.compile_train_step()
        # After the kernel's fallback, if any: the evaluator runs the program's eval step.
        self._batcher = self.program.batcher(self.plan.manifest.path, "train")
        if self.config.eval_every:
            self._evaluate = make_evaluator(self.program, self.plan.manifest.path)
        return step

    def host_batch(self, step: int) -> dict:
        return self._batcher.batch(step)

    def put_batch(self, host_batch: dict) -> dict:
        return self.program.put_batch(host_batch)

    def counters(self, done: int) -> dict[str, float]:
        seen = self._batcher.tokens_seen(done)
        if len(seen) == 1:  # one corpus: the run's tokens are its
            return {}
        return {f"corpus/{name}/tokens_seen": float(n) for name, n in seen.items()}

    def eval_due(self, done: int) -> bool:
        return self.config.eval_every > 0 and done % self.config.eval_every == 0

    def evaluate(self, params, beat) -> dict[str, dict[str, float]]:
        return {"": self._evaluate(params)}

    def redone(self, record: dict, start_step: int) -> bool:
        return record.get("step", 0) > start_step

    def finish(self, state: TrainState, run: loop.LoopRun) -> TrainState:
        if run.start_step >= self.config.num_train_steps:
            log.info(
                "%s: already complete at step %d; raise --config.num_train_steps (with "
                "--change_schedule) to continue.",
                run.workdir,
                run.start_step,
            )
        return state
