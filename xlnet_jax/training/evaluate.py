"""Held-out evaluation: the evaluator the training loop calls, and `xlnet-jax eval`.

Training imports `make_evaluator` from here; evaluation never depends on the loop.
"""

import logging
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from xlnet_jax import paths
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.data.corpus import unigram_entropy
from xlnet_jax.data.manifest import Manifest
from xlnet_jax.errors import CheckpointError
from xlnet_jax.run.preflight import check_run
from xlnet_jax.training import run_config, sharding
from xlnet_jax.training.metrics import MetricsWriter, read_metrics
from xlnet_jax.training.program import Program, build_program

log = logging.getLogger(__name__)


def make_evaluator(program: Program, corpus_dir: str) -> Callable[[Any], dict]:
    """params -> held-out PLM loss and accuracy over eval_steps validation batches, with what
    was measured: rows, new tokens read, targets, and the loss's standard error over batches.

    The memory starts from zeros and is carried across the batches; the PLM keys are fixed,
    so every evaluation of the same params sees the same targets.
    """
    config = program.config
    batcher = program.batcher(corpus_dir, "validation")
    zero_mems = program.zero_mems()
    base_key = jax.random.PRNGKey(config.seed + 1)

    def evaluate(params) -> dict:
        mems, totals = zero_mems, []
        for index in range(config.eval_steps):
            key = jax.random.fold_in(base_key, index)
            batch = program.put_batch(batcher.batch(index))
            mems, terms = program.eval_step(params, mems, batch, key)
            totals.append(terms)
        per_batch = np.asarray(jax.device_get(totals), dtype=np.float64)  # [steps, 3]
        nll, count, correct = per_batch.sum(axis=0)
        rows = config.eval_steps * config.batch_size
        streams = config.batch_size // 2 if config.bi_data else config.batch_size
        result = {
            "loss": float(nll) / max(float(count), 1.0),
            "accuracy": float(correct) / max(float(count), 1.0),
            "rows": rows,
            # each stream reads reuse_len new tokens a batch (bi_data rows reverse a stream)
            "tokens": config.eval_steps * streams * config.reuse_len,
            "targets": int(count),
        }
        if config.eval_steps > 1:  # the spread of the batch means, over sqrt(batches)
            losses = per_batch[:, 0] / np.maximum(per_batch[:, 1], 1.0)
            result["loss_stderr"] = float(np.std(losses, ddof=1) / np.sqrt(len(losses)))
        return result

    return evaluate


def evaluate_workdir(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Restores the newest checkpoint and evaluates eval_steps validation batches.

    Fields that differ from the run's saved config (WORKDIR/config.json) are listed in
    one line: a different batch or eval_steps changes the result.
    """
    step = run_config.newest_step(workdir)
    if step is None:  # checked first: evaluating must not create anything in the workdir
        raise CheckpointError(f"{workdir} has no checkpoint to evaluate; train first.")
    saved = run_config.load(workdir)
    changed = run_config.changes(saved, config) if saved is not None else {}
    if changed:
        log.warning("Evaluating with a config %s", run_config.describe(changed, step))
    manifest, fingerprint = check_run(config, jax.device_count(), evaluates=True)
    mesh = sharding.make_mesh(config)
    with sharding.activate(mesh, config.logical_axis_rules):
        return _evaluate(config, workdir, mesh, manifest, fingerprint)


def _evaluate(
    config: ml_collections.ConfigDict, workdir: str, mesh, manifest: Manifest, fingerprint: str
) -> dict:
    program = build_program(config, mesh)
    checkpointer = Checkpointer(workdir, config)
    state = checkpointer.restore(program.abstract_state, config, fingerprint, move_damaged=False)
    checkpointer.close()
    if state is None:
        raise CheckpointError(f"{workdir} has no checkpoint to evaluate; train first.")
    evaluate = make_evaluator(program, manifest.path)
    result = evaluate(state.params)
    result["step"] = int(jax.device_get(state.step))
    result["unigram_entropy"] = unigram_entropy(manifest, config.vocab_size)
    # Recorded unless training already evaluated this checkpoint: each step once in
    # metrics.jsonl. Appended, never rewritten: a run may be writing the file right now.
    recorded = (paths.as_path(workdir) / "metrics.jsonl").exists() and result["step"] in (
        read_metrics(workdir, kind="eval")
    )
    if not recorded:
        writer = MetricsWriter(workdir, enabled=jax.process_index() == 0)
        writer.write(
            result["step"], {"loss": result["loss"], "accuracy": result["accuracy"]}, kind="eval"
        )
        writer.close()
    return result
