"""The one step loop: pretraining (training/train.py) and fine-tuning (finetune/train.py) run it.

A program hands the loop its state layout, its compiled step, the batch of step t and a few
hooks (`LoopProgram`); the loop owns everything a run must guarantee whatever it trains:

- the workdir's lock (a gs:// lease), and the fence that cuts every write once the lease is
  lost; both are lifted only when no save or metrics upload still writes
  (`Fence.release_when_quiet`), so no write of this run outlives its lease;
- the checkpointer: restore of the newest intact checkpoint (bit-for-bit resume: the batch
  and randomness of step t are functions of (seed, step)), a save every checkpoint_every
  steps and at the end, each after a free-space check and after the metrics a resume keeps;
- SIGTERM and Ctrl-C (preemption.py): save at the next step boundary and stop;
- the non-finite monitor (nonfinite.py): config.nonfinite_policy, before any save;
- metrics.jsonl and TensorBoard, the progress line (step, loss, tokens/s, MFU, ETA), the
  launcher's heartbeat, the profiler, the input prefetch and the transfer guard.
"""

import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import ml_collections

from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.hardware import chips
from xlnet_jax.run.fence import Fence
from xlnet_jax.run.heartbeat import Heartbeat
from xlnet_jax.run.workdir import MIN_FREE_BYTES, check_free_space, prepare_workdir
from xlnet_jax.training import run_config
from xlnet_jax.training.metrics import MetricsWriter
from xlnet_jax.training.nonfinite import NonFiniteMonitor
from xlnet_jax.training.preemption import Preemption
from xlnet_jax.training.profiling import StepProfiler
from xlnet_jax.training.progress import ProgressLine

log = logging.getLogger(__name__)


class LoopProgram(Protocol):
    """What a program gives the loop (pretraining's PretrainRun, fine-tuning's FinetuneRun).

    Attributes:
      config: the run's config (num_train_steps, log_every, checkpoint_every, nonfinite_policy,
        metrics_wait_s, ...); saved to WORKDIR/config.json.
      abstract_state: the TrainState's shapes, dtypes and shardings (restore, free space).
      fingerprint: what the checkpoints' data must match (the corpus, the task's features).
      tokens_per_step, flops_per_device: the throughput counters: tokens a step reads, and
        FLOPs a step costs each device of the mesh (0: not counted, no MFU).
    """

    config: ml_collections.ConfigDict
    abstract_state: TrainState
    fingerprint: str
    tokens_per_step: int
    flops_per_device: float

    def activate(self) -> contextlib.AbstractContextManager:
        """The mesh and logical axis rules under which the steps run."""

    def start_state(self, restored: TrainState | None) -> TrainState:
        """The state to train from: a new run's (restored None) or a restored one's."""

    def on_start(self, workdir: str) -> None:
        """Process 0's writes at the start, after config.json (fine-tuning's run record)."""

    def compile_train_step(self) -> Callable:
        """The compiled (state, batch) -> (state, metrics) step, the state donated; the
        program readies its input and evaluation here too (on the main thread, before any
        batch is asked for)."""

    def host_batch(self, step: int) -> Any:
        """This process's rows of the batch of step `step` (run on the prefetch thread)."""

    def put_batch(self, host_batch: Any) -> dict:
        """Host rows -> the global batch on the mesh."""

    def counters(self, done: int) -> dict[str, float]:
        """Scalars of the run's progress at step `done` for its train record (pretraining:
        the tokens seen of each corpus)."""

    def eval_due(self, done: int) -> bool:
        """Whether the loop evaluates after step `done`."""

    def evaluate(self, params, beat: Callable[[], None]) -> dict[str, dict[str, float]]:
        """{name: eval record of flat scalars}: one record per evaluated set (pretraining's
        one under "", fine-tuning's per split); `beat` runs between its batches."""

    def redone(self, record: dict, start_step: int) -> bool:
        """Whether a metrics.jsonl record is logged again by a run resumed at start_step."""

    def finish(self, state: TrainState, run: "LoopRun") -> Any:
        """The end of the run, still under the lease (fine-tuning's final evaluation);
        its value is what `run` returns."""


@dataclasses.dataclass
class LoopRun:
    """The resources of a running loop that a program's `finish` may use."""

    workdir: str
    start_step: int
    primary: bool
    fence: Fence
    writer: MetricsWriter
    progress: ProgressLine
    preemption: Preemption
    heartbeat: Heartbeat


def _state_bytes(abstract_state: TrainState) -> int:
    """Bytes of one checkpoint's arrays: the free space a save needs."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_state))


def eval_line(done: int, name: str, result: dict) -> str:
    """The progress note of an in-loop evaluation of set `name` ("": the run's one)."""
    where = f"eval at step {done}, {name}" if name else f"eval at step {done}"
    return f"{where}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items())


def run(
    program: LoopProgram,
    workdir: str,
    *,
    preemption: Preemption | None = None,
    prefix: str = "",
    profile_steps: str = "",
) -> Any:
    """Trains `program` to config.num_train_steps in `workdir`, resuming from its newest
    intact checkpoint, then returns `program.finish`'s value (it runs even when the restored
    step is already the last, and nothing is compiled then).

    preemption: the SIGTERM / Ctrl-C watcher to obey, where runs in threads share the main
    thread's (default: this run's own). prefix: what each console line starts with.
    profile_steps: "START:END" traces those steps (profiling.py).
    """
    config = program.config
    primary = jax.process_index() == 0
    checkpoint_bytes = _state_bytes(program.abstract_state)
    profiler = StepProfiler(profile_steps, workdir)
    # Each resource is released on any exit, errors included, before the error reaches the
    # user: orbax's threads then add no shutdown noise after the one-line message.
    with contextlib.ExitStack() as cleanup, program.activate():
        cleanup.callback(profiler.stop)
        lock = prepare_workdir(workdir, checkpoint_bytes)
        # From here on no write outlives the lease (fence.py). Fence and lock are lifted
        # last, and only once none of `writing` (the saves, the metrics uploads) still writes.
        fence = Fence.around(lock)
        writing = []
        cleanup.callback(fence.release_when_quiet, lock, writing)
        checkpointer = Checkpointer(workdir, config)
        writing.append(checkpointer.writing)
        cleanup.callback(checkpointer.close)
        state = program.start_state(
            checkpointer.restore(program.abstract_state, config, program.fingerprint)
        )
        start_step = int(jax.device_get(state.step))
        if start_step:
            log.info("Resumed from step %d in %s", start_step, workdir)
        fence.check()
        if primary:
            run_config.save(workdir, config)
            program.on_start(workdir)
        # Records past the restored step are of a lost attempt; the run logs them again.
        writer = MetricsWriter(
            workdir,
            enabled=primary,
            drop=lambda record: program.redone(record, start_step),
            sync_wait_s=config.metrics_wait_s,
        )
        writing.append(writer.writing)
        cleanup.callback(writer.close)
        progress = ProgressLine(config.num_train_steps, enabled=primary, prefix=prefix)
        if preemption is None:
            preemption = Preemption()
            cleanup.callback(preemption.restore)
        heartbeat = Heartbeat()
        loop_run = LoopRun(
            workdir, start_step, primary, fence, writer, progress, preemption, heartbeat
        )
        if start_step < config.num_train_steps:
            state = _steps(program, workdir, state, loop_run, checkpointer, profiler, cleanup,
                           checkpoint_bytes)  # fmt: skip
        checkpointer.wait()
        fence.check()
        return program.finish(state, loop_run)


def _steps(
    program: LoopProgram,
    workdir: str,
    state: TrainState,
    run: LoopRun,
    checkpointer: Checkpointer,
    profiler: StepProfiler,
    cleanup: contextlib.ExitStack,
    checkpoint_bytes: int,
) -> TrainState:
    """Steps from run.start_step to num_train_steps (or a stop); returns the last state."""
    config, start_step = program.config, run.start_step
    writer, progress, fence, heartbeat = run.writer, run.progress, run.fence, run.heartbeat
    compile_start = time.time()
    step_fn = program.compile_train_step()
    log.info("Compiled the train step in %.1f s", time.time() - compile_start)
    prefetch = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    cleanup.callback(prefetch.shutdown, wait=False, cancel_futures=True)
    next_batch = prefetch.submit(program.host_batch, start_step)
    peak_tflops, peak_note = chips.mfu_peak(
        config.peak_tflops_per_device, chips.local_device_kind()
    )
    if program.flops_per_device:
        progress.note(peak_note)
    monitor = NonFiniteMonitor(config.nonfinite_policy, start_step)
    last_saved = start_step or None
    # Step time counts steps only: the clock starts once this run's first step has ended
    # (its wait for the first batch, a restore's or compile's tail, are not a step's time).
    pending, timed, interval_start, first_time = [], 0, time.time(), None
    for step in range(start_step, config.num_train_steps):
        batch = program.put_batch(next_batch.result())
        if step + 1 < config.num_train_steps:
            next_batch = prefetch.submit(program.host_batch, step + 1)
        profiler.before_step(step)
        with jax.transfer_guard("disallow"):
            state, metrics = step_fn(state, batch)
        pending.append(metrics)
        checkpointer.poll()  # a save that ended is reported now, not at the next save
        done = step + 1
        heartbeat.beat()
        profiler.after_step(done, metrics)
        if first_time is None:
            jax.block_until_ready(metrics)
            first_time = time.time() - interval_start
            interval_start = time.time()
        else:
            timed += 1
        # Steps counted from this run's start: JAX's sync protocol puts the save at one
        # past the highest count reported, so a notice that arrives while a resumed run
        # restores or compiles (count 0) must not point at an absolute step long past.
        stop = run.preemption.requested(done - start_step)
        save = stop or done % config.checkpoint_every == 0 or done == config.num_train_steps
        # A due save fetches the metrics first: a non-finite step must stop the run before
        # a checkpoint of its state is written.
        if save or done % config.log_every == 0 or monitor.due(done):
            records = jax.device_get(pending)
            step_time = (time.time() - interval_start) / timed if timed else first_time
            for offset, record in enumerate(records):
                record["step"] = done - len(records) + offset + 1
            throughput = _throughput(program, step_time, peak_tflops)
            for record in records:
                scalars = {k: float(v) for k, v in record.items() if k != "step"}
                counters = program.counters(record["step"])
                writer.write(record["step"], {**scalars, **counters, **throughput})
            progress.update(done, records[-1], throughput)
            pending, timed, interval_start = [], 0, time.time()
            final = done == config.num_train_steps
            monitor.check(records, last_saved, save_due=save, final=final)
        if program.eval_due(done):
            for name, result in program.evaluate(state.params, heartbeat.beat).items():
                writer.write(done, result, kind="eval")
                progress.note(eval_line(done, name, result))
            timed, interval_start = 0, time.time()
            heartbeat.beat()
        if save:
            fence.check()
            check_free_space(workdir, checkpoint_bytes + MIN_FREE_BYTES, f"saving step {done}")
            writer.sync()  # a checkpoint never outruns the metrics a resume keeps
            fence.check()  # the sync may have waited out the lease
            if checkpointer.save(state, make_meta(config, program.fingerprint, done)):
                last_saved = done
            heartbeat.beat()
        if stop:
            checkpointer.wait()
            run.preemption.stop(done, config.num_train_steps, progress.note)
            break
    return state


def _throughput(program: LoopProgram, step_time: float, peak_tflops: float) -> dict:
    """The interval's counters: tokens/s and step time; TFLOP/s per device and MFU where
    the program counts its FLOPs."""
    speed = {"tokens_per_sec": program.tokens_per_step / step_time, "step_time": step_time}
    if program.flops_per_device:
        tflops = program.flops_per_device / step_time / 1e12
        speed.update(tflops_per_device=tflops, mfu=tflops / peak_tflops)
    return speed
