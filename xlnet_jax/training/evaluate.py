"""Held-out evaluation: the evaluator the training loop calls, and `xlnet-jax eval`.

Training imports `make_evaluator` from here; evaluation never depends on the loop.

`eval` scores a run's newest checkpoint on its own corpus (the result is recorded in the
run's metrics.jsonl), or params on any corpus prepared with their tokenizer: a run's on
another corpus, or an `--init_from` source (an HF directory, an import-hf output, a
workdir), checked as `train --init_from` checks them; those results are printed only.
Beside the loss come two context-free baselines, named for what they are
(unigram_baselines).
"""

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.data.corpus import cross_entropy, unigram_counts
from xlnet_jax.data.manifest import Manifest, load_manifest, manifest_fingerprint
from xlnet_jax.data.mixture import corpus_dirs
from xlnet_jax.errors import CheckpointError, DataError
from xlnet_jax.run.init_from import place_params
from xlnet_jax.run.preflight import check_run, check_run_from
from xlnet_jax.training import run_config, sharding, steps
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
    step = program.eval_step
    corpora = len(batcher.names)
    if corpora > 1:  # a mixture: the same forward, its terms summed per corpus
        step = jax.jit(
            functools.partial(
                steps.eval_step_by_corpus, model=program.model, config=config, corpora=corpora
            ),
            out_shardings=(program.state_shardings.mems, sharding.replicated(program.mesh)),
        )
        # the same on every process (a function of the layout): replicated
        rows = jax.device_put(batcher.row_corpus, sharding.replicated(program.mesh))
        step = functools.partial(step, row_corpus=rows)

    def evaluate(params) -> dict:
        mems, totals = zero_mems, []
        for index in range(config.eval_steps):
            key = jax.random.fold_in(base_key, index)
            batch = program.put_batch(batcher.batch(index))
            mems, terms = step(params, mems, batch, key)
            totals.append(terms)
        # [steps, 3], or [steps, corpora, 3] for a mixture
        per_batch = np.asarray(jax.device_get(totals), dtype=np.float64)
        by_corpus = per_batch if corpora > 1 else per_batch[:, None, :]
        per_batch = by_corpus.sum(axis=1)
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
        if corpora > 1:
            result.update(per_corpus(batcher.names, by_corpus.sum(axis=0)))
        return result

    return evaluate


def per_corpus(names: list[str], totals: np.ndarray) -> dict:
    """`corpus/NAME/loss`, `.../accuracy` and `.../targets` of each corpus of a mixture,
    from its summed [nll, count, correct] (totals: [corpora, 3])."""
    result = {}
    for name, (nll, count, correct) in zip(names, totals, strict=True):
        result[f"corpus/{name}/loss"] = float(nll) / max(float(count), 1.0)
        result[f"corpus/{name}/accuracy"] = float(correct) / max(float(count), 1.0)
        result[f"corpus/{name}/targets"] = int(count)
    return result


def corpus_table(result: dict) -> list[str]:
    """The per-corpus lines of an eval result (none for one corpus), for `xlnet-jax eval`."""
    names = [
        key.split("/")[1] for key in result if key.startswith("corpus/") and key.endswith("/loss")
    ]
    if not names:
        return []
    width = max(len(name) for name in names + ["corpus"])
    lines = [f"{'corpus':<{width}}  held-out loss  accuracy  targets"]
    for name in names:
        lines.append(
            f"{name:<{width}}  {result[f'corpus/{name}/loss']:13.4f}  "
            f"{result[f'corpus/{name}/accuracy']:8.4f}  {result[f'corpus/{name}/targets']:,}"
        )
    return lines


def unigram_baselines(manifest: Manifest, vocab_size: int) -> dict:
    """What predictors that ignore all context score on the whole validation split, in nats.

    Returns:
      train_unigram_cross_entropy: the validation tokens' cross-entropy under the train
        split's unigram distribution (add-one smoothed over the vocabulary, so a piece
        unseen in train costs a finite amount): what a model that learned only the train
        split's piece frequencies would score.
      validation_unigram_entropy: the validation tokens' own unigram entropy, the best any
        context-free predictor can score on them; the gap between the two is what the
        train split's frequencies miss on this text.
    """
    # a mixture (its manifest's path names every corpus): the corpora's counts summed
    corpora = [dataclasses.replace(manifest, path=p) for p in corpus_dirs(manifest.path)]
    train = sum(unigram_counts(m, "train", vocab_size) for m in corpora)
    held = sum(unigram_counts(m, "validation", vocab_size) for m in corpora)
    seen = held > 0
    probs = held[seen] / held.sum()
    train_probs = (train[seen] + 1.0) / (train.sum() + vocab_size)
    return {
        "train_unigram_cross_entropy": cross_entropy(probs, train_probs),
        "validation_unigram_entropy": cross_entropy(probs, probs),
    }


def evaluate_run(
    config: ml_collections.ConfigDict, workdir: str | None, init_from: str | None = None
) -> dict:
    """`xlnet-jax eval`: the run in `workdir` on its corpus, else the params of `init_from`
    (or of `workdir`'s newest checkpoint) on config.corpus_dir.

    Returns make_evaluator's result with "step" (None for a source without one),
    "scored" (what was scored), "corpus", "recorded" (whether metrics.jsonl got it) and
    unigram_baselines'.
    """
    # The run's recorded data_ranges, or (for params alone) this process count's.
    config = run_config.with_data_ranges(config, workdir, jax.process_count())
    if workdir is not None and init_from is None:
        if run_config.newest_step(workdir) is None:
            raise CheckpointError(f"{workdir} has no checkpoint to evaluate; train first.")
        if _trained_on(workdir, config.corpus_dir):
            return evaluate_workdir(config, workdir)
    manifest, _, source = check_run_from(
        config, jax.device_count(), evaluates=True, init_from=init_from or workdir
    )
    mesh = sharding.make_mesh(config)
    with sharding.activate(mesh, config.logical_axis_rules):
        program = build_program(config, mesh)
        params = place_params(source.params, program.state_shardings.params)
        result = make_evaluator(program, manifest.path)(params)
    step = f" at step {source.step}" if source.step is not None else ""
    result.update(step=source.step, scored=f"the {source.kind} {source.path}{step}")
    result["recorded"] = False
    result.update(corpus=config.corpus_dir, **unigram_baselines(manifest, config.vocab_size))
    return result


def _trained_on(workdir: str, corpus_dir: str) -> bool:
    """Whether corpus_dir holds the corpus the run in workdir was trained on (same
    fingerprint; the same path when either manifest is unreadable, so that check_run
    reports it)."""
    saved = run_config.load(workdir)
    if saved is None or saved.corpus_dir == corpus_dir:
        return True
    try:
        run_corpus, corpus = load_manifest(saved.corpus_dir), load_manifest(corpus_dir)
    except DataError:
        return False
    return manifest_fingerprint(run_corpus) == manifest_fingerprint(corpus)


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
    result.update(scored=f"the workdir {workdir} at step {result['step']}")
    result["corpus"] = config.corpus_dir  # as the user named it, not its staged copy
    result.update(unigram_baselines(manifest, config.vocab_size))
    # Recorded unless training already evaluated this checkpoint: each step once. Never
    # rewriting the run's metrics.jsonl, which a run may be writing right now: appended to
    # locally, an object of its own on gs:// (metrics.py).
    try:
        recorded = result["step"] in read_metrics(workdir, kind="eval")
    except FileNotFoundError:
        recorded = False
    result["recorded"] = True  # now or by training
    if not recorded:
        writer = MetricsWriter(workdir, enabled=jax.process_index() == 0, holds_workdir=False)
        scores = {k: v for k, v in result.items() if k.startswith("corpus/")}
        scores.update(loss=result["loss"], accuracy=result["accuracy"])
        writer.write(result["step"], scores, kind="eval")
        writer.close()
    return result
