"""A fine-tuned model's predictions and metrics on a split: the loop's in-run evaluations, the
final evaluation and its files.

This process reads its rows of each batch (program.host_rows); the outputs come back
replicated, so every process holds all predictions and metrics, and process 0 alone
writes the files.
"""

import logging
from collections.abc import Callable

import jax
import numpy as np

from xlnet_jax.finetune import batches, outputs
from xlnet_jax.finetune.prepare import Inputs, Split
from xlnet_jax.finetune.program import FinetuneProgram

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
