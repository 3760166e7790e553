"""The fine-tuning loop: train with checkpoints and resume, evaluate, write predictions.

A run in a workdir that holds checkpoints resumes from the newest intact one and ends
exactly as an uninterrupted run would: the batch and the dropout of step t are functions
of (seed, step) only (batches.py, program.py). The workdir is locked (or leased on gs://)
as in pretraining, and no write outlives the lease. SIGTERM and Ctrl-C save at the next
step boundary and stop, as in pretraining (training/preemption.py); during the final
evaluation, at the next batch: the last step is saved by then, so the run stops (exit 6, or
130 after Ctrl-C) without writing eval_results.json, and a rerun evaluates again.

A rerun that asks for another run than the workdir's checkpoints hold is refused before
anything runs (rerun.py).

The loop touches the launcher's heartbeat file (run/heartbeat.py) after each step, save and
evaluation batch, so `launch run finetune` tells a hung run from a long one.

Several processes (jax.distributed, one per host) share one run as pretraining's do. Each
reads and tokenizes the splits (the fingerprint a resume checks, and SQuAD's window count,
need every feature; tokenizing is the same wall time on every host), then gathers and sends
only its own rows of each global batch: the rows its devices hold (program.host_rows), for
training and evaluation alike. The batches, and so the steps, are the one-process run's.
Each host evaluates its rows of each eval batch; the outputs come back replicated, so every
process holds all predictions and metrics (no further gather) and process 0 alone writes
the workdir's files: config, finetune.json, metrics, predictions, submissions and
eval_results.json, each after its lease is checked. Every process holds a lock (or gs://
lease) of its own and saves its shards of the checkpoints.
"""

import contextlib
import datetime
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence

import jax
import ml_collections
import numpy as np

from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.hf import encoder_params
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.finetune import batches, outputs, rerun
from xlnet_jax.finetune.prepare import Inputs, Split
from xlnet_jax.finetune.program import FinetuneProgram, build
from xlnet_jax.run.fence import Fence
from xlnet_jax.run.heartbeat import Heartbeat
from xlnet_jax.run.validate import validate_batch_layout
from xlnet_jax.run.workdir import prepare_workdir
from xlnet_jax.training import run_config, sharding
from xlnet_jax.training.metrics import MetricsWriter
from xlnet_jax.training.preemption import Preemption, SavedAndInterrupted, StoppedBeforeEnd
from xlnet_jax.training.progress import ProgressLine

log = logging.getLogger(__name__)


def predict(
    program: FinetuneProgram,
    params,
    split: Split,
    batch_size: int,
    check_stop: Callable[[], None] = lambda: None,
) -> tuple[float, list]:
    """(mean loss, one prediction record per example) of a split, without dropout;
    `check_stop` runs before each batch (it raises to stop). This process reads its rows of
    each batch; the outputs, replicated, are the whole batch's."""
    total, weight, chunks = 0.0, 0.0, []
    rows = program.host_rows(batch_size)
    for batch, real in batches.eval_batches(split.features, batch_size, rows):
        check_stop()
        loss_sum, count, out = program.predict_step(params, program.put_rows(batch, batch_size))
        total, weight = total + float(loss_sum), weight + float(count)
        chunks.append(jax.tree.map(lambda x, n=real: np.asarray(x)[:n], out))
    stacked = jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)
    records = program.task.predict(split.examples, split.features, stacked, program.labels)
    return total / max(weight, 1.0), records


def evaluate(
    program: FinetuneProgram,
    params,
    inputs: Inputs,
    workdir: str | None = None,
    check_stop: Callable[[], None] = lambda: None,
):
    """{split: metrics and loss} of every labelled split (the eval splits, labelled tests);
    with `workdir`, process 0 also writes each split's predictions and its task's submission
    files. `check_stop` runs before each batch (it raises to stop)."""
    results = {}
    primary = jax.process_index() == 0
    splits = [*inputs.evals, *inputs.tests] if workdir else inputs.evals
    for split in splits:
        loss, records = predict(program, params, split, program.config.batch_size, check_stop)
        if program.task.labelled(split.examples):
            metrics = program.task.metrics(split.examples, records)
            results[split.name] = {**metrics, "loss": loss}
        if workdir is None or not primary:
            continue
        log.info("wrote %s", outputs.write_predictions(workdir, split.name, records))
        for name, text in program.task.submission_files(split.name, records):
            log.info("wrote %s", outputs.write_submission(workdir, name, text))
    return results


def _initial_state(program: FinetuneProgram, inputs: Inputs, random_weights: bool):
    state = program.init_state()
    if random_weights:
        log.info(
            "Starting from random weights (the tokenizer and shape of %s).", inputs.source.path
        )
        return state
    shardings = jax.tree.map(lambda a: a.sharding, program.abstract_state.params["transformer"])
    # Copied through the host: the train step donates the state, and a device array put on
    # its own sharding would be the source's own buffer (a second seed reads it again).
    host = jax.tree.map(np.asarray, encoder_params(inputs.source.params))
    pretrained = jax.device_put(host, shardings)
    log.info("Starting from the params of the %s %s.", inputs.source.kind, inputs.source.path)
    if inputs.source.kind.startswith("fine-tuned"):
        log.info("Its encoder only: the %s head of %s starts fresh.", program.task.head,
                 program.task.name)  # fmt: skip
    return state.replace(params={**state.params, "transformer": pretrained})


def finetune(
    inputs: Inputs,
    workdir: str,
    *,
    random_weights: bool = False,
    devices: Sequence[jax.Device] | None = None,
    preemption: Preemption | None = None,
    prefix: str = "",
) -> dict[str, dict]:
    """Fine-tunes to config.num_train_steps in `workdir` (resuming), then evaluates and writes
    eval_results.json, predictions/ and the task's submission files; returns the final results.

    devices: the mesh's (default: every device). preemption: the SIGTERM / Ctrl-C watcher to
    obey, where runs in threads share the main thread's (default: this run's own). prefix:
    what each console line starts with."""
    config: ml_collections.ConfigDict = inputs.config
    rerun.check(workdir, inputs, random_weights)
    finished = outputs.read_final_results(workdir, config.num_train_steps)
    if finished is not None:
        log.info(
            "%s finished at step %d: its results are in %s; nothing to redo (a new --workdir, "
            "or deleting that file, evaluates again).",
            workdir, config.num_train_steps, outputs.EVAL_RESULTS,
        )  # fmt: skip
        return finished
    mesh = sharding.make_mesh(config, devices)
    validate_batch_layout(config, sharding.num_data_shards(mesh), bi_data=False)
    primary = jax.process_index() == 0
    # One feature gives build its shapes: no process reads a row of another's share.
    example = batches.take(inputs.train.features, np.zeros(1, int), np.ones(1))
    program = build(config, inputs.task, inputs.labels, mesh, example)
    rows = program.host_rows(config.batch_size)
    if jax.process_count() > 1:
        log.info(
            "process %d of %d reads rows %s of each batch of %d", jax.process_index(),
            jax.process_count(), _spans(rows), config.batch_size,
        )  # fmt: skip
    checkpoint_bytes = sum(
        x.size * x.dtype.itemsize for x in jax.tree.leaves(program.abstract_state)
    )
    fingerprint = inputs.fingerprint()
    with contextlib.ExitStack() as cleanup, program.activate():
        lock = prepare_workdir(workdir, checkpoint_bytes)
        cleanup.callback(lock.release)
        fence = Fence.around(lock)
        cleanup.callback(fence.close)
        checkpointer = Checkpointer(workdir, config)
        cleanup.callback(checkpointer.close)
        state = checkpointer.restore(program.abstract_state, config, fingerprint)
        if state is None:
            state = _initial_state(program, inputs, random_weights)
        start = int(jax.device_get(state.step))
        if start:
            log.info("Resumed from step %d in %s", start, workdir)
        fence.check()
        if primary:
            run_config.save(workdir, config)
            outputs.write_run_info(workdir, {
                **rerun.run_info(inputs, random_weights),
                "tokenizer": outputs.copy_tokenizer(workdir, inputs.encoder.model_path),
            })  # fmt: skip
        writer = MetricsWriter(
            workdir, enabled=primary, drop=functools.partial(_redone, start, config)
        )
        cleanup.callback(writer.close)
        progress = ProgressLine(config.num_train_steps, enabled=primary, prefix=prefix)
        tokens = config.batch_size * math.prod(example["input_ids"].shape[1:])
        interval_start, pending = time.time(), []
        if preemption is None:
            preemption = Preemption()
            cleanup.callback(preemption.restore)
        heartbeat = Heartbeat()
        for step in range(start, config.num_train_steps):
            batch = batches.train_batch(
                inputs.train.features, config.batch_size, config.seed, step, rows
            )
            state, metrics = program.train_step(state, program.put_rows(batch, config.batch_size))
            pending.append(metrics)
            done = step + 1
            heartbeat.beat()
            stop = preemption.requested(done - start)
            save = stop or done % config.checkpoint_every == 0 or done == config.num_train_steps
            if save or done % config.log_every == 0:
                records = jax.device_get(pending)
                step_time = (time.time() - interval_start) / len(records)
                speed = {"step_time": step_time, "tokens_per_sec": tokens / step_time}
                for offset, record in enumerate(records):
                    scalars = {k: float(v) for k, v in record.items()}
                    writer.write(done - len(records) + offset + 1, {**scalars, **speed})
                eta = (config.num_train_steps - done) * step_time
                progress.note(
                    f"step {done}/{config.num_train_steps} | loss {float(records[-1]['loss']):.4f}"
                    f" | {tokens / step_time:,.0f} tok/s | {step_time * 1e3:.0f} ms/step | "
                    f"ETA {datetime.timedelta(seconds=round(eta))}"
                )
                pending, interval_start = [], time.time()
            if (
                config.eval_every
                and done % config.eval_every == 0
                and done < config.num_train_steps
            ):
                evals = evaluate(program, state.params, inputs, check_stop=heartbeat.beat)
                for split, result in evals.items():
                    writer.write(done, {f"{split}/{k}": v for k, v in result.items()}, kind="eval")
                    progress.note(f"eval at step {done}, {split}: {_line(result)}")
                interval_start = time.time()
            if save:
                fence.check()
                writer.sync()
                fence.check()
                checkpointer.save(state, make_meta(config, fingerprint, done))
                heartbeat.beat()
            if stop:
                checkpointer.wait()
                preemption.stop(done, config.num_train_steps, progress.note)
        checkpointer.wait()
        fence.check()
        final = config.num_train_steps
        stop_evaluation = functools.partial(_stop_evaluation, preemption, final, progress.note)

        def check_stop() -> None:
            heartbeat.beat()
            stop_evaluation()

        results = evaluate(program, state.params, inputs, workdir, check_stop)
        for split, result in results.items():
            writer.write(config.num_train_steps, {f"{split}/{k}": v for k, v in result.items()},
                         kind="eval")  # fmt: skip
            progress.note(f"{split} at step {config.num_train_steps}: {_line(result)}")
        fence.check()
        if primary:
            outputs.write_json(
                workdir, outputs.EVAL_RESULTS, {"step": config.num_train_steps, **results}
            )
        if preemption.requested(final - start + 1):  # after the last batch's check
            progress.note(
                f"{preemption.signal_name} at the end of the final evaluation: its results "
                "are written; the run is complete."
            )
    return results


def _redone(start: int, config: ml_collections.ConfigDict, record: dict) -> bool:
    """Whether a metrics.jsonl record is logged again by a run resumed at `start`: the steps
    past it, and the final evaluation (a finished run's rerun evaluates again)."""
    step = record.get("step", 0)
    final = record.get("kind") == "eval" and step == config.num_train_steps
    return step > start or final


def _stop_evaluation(preemption: Preemption, step: int, note: Callable[[str], None]) -> None:
    """Stops the final evaluation after a SIGTERM or Ctrl-C (one process: the handler's flag;
    several: the signal is seen, and said, once the evaluation has finished)."""
    if preemption.signal_name is None:
        return
    note(
        f"{preemption.signal_name} during the final evaluation: step {step} is saved, its "
        "results are not written; rerun the same command to evaluate it."
    )
    if preemption.signal_name == "Ctrl-C":
        raise SavedAndInterrupted
    raise StoppedBeforeEnd(f"stopped in the final evaluation of step {step}")


def _spans(rows: np.ndarray) -> str:
    """Row positions as ranges: "0-3", "0-1, 4-5"."""
    cuts = np.flatnonzero(np.diff(rows) != 1) + 1
    return ", ".join(
        f"{part[0]}-{part[-1]}" if len(part) > 1 else f"{part[0]}" for part in np.split(rows, cuts)
    )


def _line(result: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in result.items())
