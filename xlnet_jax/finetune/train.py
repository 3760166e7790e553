"""Fine-tuning as a program of the one loop (training/loop.py): a task's step on its features,
the evaluations, and the final evaluation with its files.

A run in a workdir that holds checkpoints resumes from the newest intact one and ends
exactly as an uninterrupted run would: the batch and the dropout of step t are functions
of (seed, step) only (batches.py, program.py). The loop locks the workdir (or leases it on
gs://), fences every write to the lease and checks the free space before a save, and applies
config.nonfinite_policy, exactly as in pretraining: a run that diverges stops before a save
and writes no eval_results.json. SIGTERM and Ctrl-C save at the next
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

import functools
import logging
import math
from collections.abc import Callable, Sequence

import jax
import ml_collections
import numpy as np

from xlnet_jax.checkpoint.hf import encoder_params
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.finetune import batches, outputs, rerun
from xlnet_jax.finetune.predict import evaluate
from xlnet_jax.finetune.prepare import Inputs
from xlnet_jax.finetune.program import FinetuneProgram, build
from xlnet_jax.model.flops import finetune_flops_per_step
from xlnet_jax.run.validate import validate_batch_layout
from xlnet_jax.training import loop, sharding
from xlnet_jax.training.preemption import Preemption, SavedAndInterrupted, StoppedBeforeEnd

log = logging.getLogger(__name__)


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


class FinetuneRun:
    """A task's fine-tuning as the loop's program (training/loop.LoopProgram)."""

    def __init__(self, program: FinetuneProgram, inputs: Inputs, random_weights: bool):
        config = program.config
        self.program, self.inputs, self.random_weights = program, inputs, random_weights
        self.config = config
        self.abstract_state = program.abstract_state
        self.fingerprint = inputs.fingerprint()
        shape = program.example["input_ids"].shape  # [1, *rows, L]: one feature
        self.tokens_per_step = config.batch_size * math.prod(shape[1:])
        rows_per_feature = math.prod(shape[2:-1])
        flops = finetune_flops_per_step(config, rows_per_feature)
        self.flops_per_device = flops / program.mesh.size
        self._rows = program.host_rows(config.batch_size)

    def activate(self):
        return self.program.activate()

    def start_state(self, restored: TrainState | None) -> TrainState:
        if restored is not None:
            return restored
        return _initial_state(self.program, self.inputs, self.random_weights)

    def on_start(self, workdir: str) -> None:
        outputs.write_run_info(workdir, {
            **rerun.run_info(self.inputs, self.random_weights),
            "tokenizer": outputs.copy_tokenizer(workdir, self.inputs.encoder.model_path),
        })  # fmt: skip

    def compile_train_step(self):
        return self.program.compile_train_step()

    def host_batch(self, step: int) -> dict:
        config = self.config
        return batches.train_batch(
            self.inputs.train.features, config.batch_size, config.seed, step, self._rows
        )

    def put_batch(self, host_batch: dict) -> dict:
        return self.program.put_rows(host_batch, self.config.batch_size)

    def counters(self, done: int) -> dict[str, float]:
        return {}

    def eval_due(self, done: int) -> bool:
        every = self.config.eval_every
        return bool(every) and done % every == 0 and done < self.config.num_train_steps

    def evaluate(self, params, beat: Callable[[], None]) -> dict[str, dict[str, float]]:
        evals = evaluate(self.program, params, self.inputs, check_stop=beat)
        return {split: _record(split, result) for split, result in evals.items()}

    def redone(self, record: dict, start_step: int) -> bool:
        """The steps past start_step, and the final evaluation (a finished run's rerun
        evaluates again)."""
        step = record.get("step", 0)
        final = record.get("kind") == "eval" and step == self.config.num_train_steps
        return step > start_step or final

    def finish(self, state: TrainState, run: loop.LoopRun) -> dict[str, dict]:
        """The final evaluation: metrics, predictions, submissions, eval_results.json."""
        final = self.config.num_train_steps
        stop_evaluation = functools.partial(
            _stop_evaluation, run.preemption, final, run.progress.note
        )

        def check_stop() -> None:
            run.heartbeat.beat()
            stop_evaluation()

        results = evaluate(self.program, state.params, self.inputs, run.workdir, check_stop)
        for split, result in results.items():
            run.writer.write(final, _record(split, result), kind="eval")
            run.progress.note(f"{split} at step {final}: {_line(result)}")
        run.fence.check()
        if run.primary:
            outputs.write_json(run.workdir, outputs.EVAL_RESULTS, {"step": final, **results})
        if run.preemption.requested(final - run.start_step + 1):  # after the last batch's check
            run.progress.note(
                f"{run.preemption.signal_name} at the end of the final evaluation: its "
                "results are written; the run is complete."
            )
        return results


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
    # One feature gives build its shapes: no process reads a row of another's share.
    example = batches.take(inputs.train.features, np.zeros(1, int), np.ones(1))
    program = build(config, inputs.task, inputs.labels, mesh, example)
    if jax.process_count() > 1:
        log.info(
            "process %d of %d reads rows %s of each batch of %d", jax.process_index(),
            jax.process_count(), _spans(program.host_rows(config.batch_size)),
            config.batch_size,
        )  # fmt: skip
    run = FinetuneRun(program, inputs, random_weights)
    return loop.run(run, workdir, preemption=preemption, prefix=prefix)


def _record(split: str, result: dict) -> dict[str, float]:
    """A split's metrics as its eval record: {"split/name": value}."""
    return {f"{split}/{k}": v for k, v in result.items()}


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
