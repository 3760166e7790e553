"""The one validation pass before anything compiles: the config and its corpus together.

`train` (and `train --dry_run`, which stops here) and `eval` call `check_run`. It gathers
every problem it can find (config fields, the tokenizer's vocabulary against
config.vocab_size, each split's size against the batch that reads it, and with
`--init_from` the source's architecture and tokenizer: check_run_from) and reports them
all at once, one line each, naming the field or file and values that would work, so a new
corpus or config takes one round of fixes, not one per compile.
"""

import dataclasses
import math

import ml_collections

from xlnet_jax import paths
from xlnet_jax.data import mixture
from xlnet_jax.data.manifest import Manifest, load_manifest, manifest_fingerprint
from xlnet_jax.data.prepare_notes import split_need
from xlnet_jax.data.staging import stage_corpus
from xlnet_jax.errors import ConfigError, DataError, XLNetJaxError
from xlnet_jax.run import validate
from xlnet_jax.run.fields import field_problem
from xlnet_jax.run.init_from import (
    Source,
    architecture_problem,
    load_source,
    tokenizer_problem,
)


def check_run(
    config: ml_collections.ConfigDict, num_devices: int, *, evaluates: bool
) -> tuple[Manifest, str]:
    """The corpus manifest and fingerprint, or a ConfigError listing every problem.

    Args:
      config: the resolved config.
      num_devices: devices the mesh spans.
      evaluates: whether the validation split will be read (eval, or eval_every > 0).
    """
    manifest, fingerprint, _ = check_run_from(config, num_devices, evaluates=evaluates)
    return manifest, fingerprint


def check_run_from(
    config: ml_collections.ConfigDict,
    num_devices: int,
    *,
    evaluates: bool,
    init_from: str | None = None,
) -> tuple[Manifest, str, Source | None]:
    """check_run, and the params at `init_from` loaded and checked in the same round.

    An unreadable source, another architecture or another tokenizer than the corpus's is
    one more line among the config's and the corpus's problems (init_from.py).

    Returns:
      The manifest, its fingerprint and the source (None without init_from).
    """
    problems = config_problems(config, num_devices)
    source = None
    if init_from:
        try:
            source = load_source(init_from)
        except XLNetJaxError as e:
            problems.append(str(e))
        else:
            problems += filter(None, [architecture_problem(source, config)])
    dirs, manifests = [], []
    if not config.corpus_dir:
        problems.append(
            "config.corpus_dir: is empty; run `xlnet-jax prepare --out DIR` and pass "
            "--config.corpus_dir=DIR."
        )
    else:
        try:
            dirs = mixture.corpus_dirs(config.corpus_dir)
        except ConfigError as e:
            problems.append(str(e))
        for directory in dirs:
            try:
                manifests.append(load_manifest(directory))
            except DataError as e:
                problems.append(f"config.corpus_dir: {e}")
    if manifests and len(manifests) == len(dirs):
        problems += _corpora_problems(config, manifests, evaluates=evaluates)
        if source is not None:
            problems += filter(None, [tokenizer_problem(source, manifests[0])])
    elif dirs:  # a corpus is missing: its weights are still checked in this round
        try:
            mixture.parse_weights(config.corpus_weights, len(dirs))
        except ConfigError as e:
            problems.append(str(e))
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        lines = "\n".join(f"  {problem}" for problem in problems)
        raise ConfigError(f"{len(problems)} problems with the config and corpus:\n{lines}")
    # ArrayRecord reads local files: a verified copy of each remote corpus
    staged = [
        stage_corpus(manifest) if paths.is_remote(directory) else manifest
        for directory, manifest in zip(dirs, manifests, strict=True)
    ]
    fingerprint = mixture.mixture_fingerprint([manifest_fingerprint(m) for m in staged])
    if len(staged) == 1:
        return staged[0], fingerprint, source
    # A mixture: the first corpus's manifest (the shared tokenizer) naming every staged
    # corpus, comma-separated, which Program.batcher and make_evaluator read as a mixture.
    joined = mixture.SEPARATOR.join(m.path for m in staged)
    return dataclasses.replace(staged[0], path=joined), fingerprint, source


def _corpora_problems(
    config: ml_collections.ConfigDict, manifests: list[Manifest], *, evaluates: bool
) -> list[str]:
    """corpus_problems of each corpus (with a mixture's streams for each), and the
    mixture's own: its weights and one tokenizer (mixture.mixture_problems)."""
    problems = mixture.mixture_problems(config, manifests)
    if len(manifests) == 1:
        return problems + corpus_problems(config, manifests[0], evaluates=evaluates)
    if problems:
        return problems
    weights, alpha = mixture.weights_and_alpha(config)
    try:
        _, counts = mixture.block_counts(
            [m.splits.get("train", {}).get("tokens", 0) for m in manifests],
            weights,
            alpha,
            global_batch=config.batch_size,
            bi_data=config.bi_data,
            data_ranges=max(config.data_ranges, 1),
        )
    except ConfigError as e:
        return [str(e)]
    for manifest, count in zip(manifests, counts * max(config.data_ranges, 1), strict=True):
        problems += corpus_problems(config, manifest, evaluates=evaluates, streams=int(count))
    return problems


def config_problems(config: ml_collections.ConfigDict, num_devices: int) -> list[str]:
    """Every config field problem, one line each (the model's and PLM's first ones).

    A field of the wrong type or outside its own range (validate_fields) is reported
    alone: the checks that relate fields to each other assume sound fields.
    """
    problems: list[str] = []
    checks = [lambda: validate.validate_config(config, num_devices)]
    if field_problem(config) is None:
        # validate_config stops at a model or PLM problem; the training fields are then
        # checked on their own, so theirs are reported too.
        checks.append(lambda: validate.validate_training_fields(config))
    with validate.collecting(problems):
        for check in checks:
            try:
                check()
            except ConfigError as e:
                problems.append(str(e))
            except ArithmeticError:  # a later check divided by a field already reported
                pass
    return list(dict.fromkeys(problems))


def corpus_problems(
    config: ml_collections.ConfigDict,
    manifest: Manifest,
    *,
    evaluates: bool,
    streams: int | None = None,
) -> list[str]:
    """The tokenizer's vocabulary and the splits' sizes against the config; `streams`: the
    streams a mixture gives this corpus (None: all of the batch's)."""
    problems = []
    if manifest.vocab_size != config.vocab_size:
        problems.append(
            f"config.vocab_size: must equal the tokenizer's vocabulary, {manifest.vocab_size} "
            f"in {manifest.path} (got {config.vocab_size}); pass "
            f"--config.vocab_size={manifest.vocab_size}."
        )
    total = sum(split["tokens"] for split in manifest.splits.values())
    for split in ("train", "validation") if evaluates else ("train",):
        have = manifest.splits.get(split, {}).get("tokens", 0)
        need = split_need(config, split)
        if streams is not None:
            steps = config.eval_steps if split == "validation" else 1
            need = max(streams * config.reuse_len * steps, 2 * config.seq_len)
        if have >= need:
            continue
        if streams is not None:
            problems.append(
                f"{manifest.path}: the {split!r} split has {have:,} tokens, too few for its "
                f"{streams} streams of the mixture (config.corpus_dir), which read {need:,}"
                f"{' in eval_steps batches' if split == 'validation' else ' in one step'} of "
                f"reuse_len={config.reuse_len}; give it a lower share (config.corpus_weights), "
                "a smaller batch_size, or more text."
            )
            continue
        batch_streams = config.batch_size // 2 if config.bi_data else config.batch_size
        reads = (
            f"eval_steps={config.eval_steps} batches of {batch_streams} streams x "
            f"reuse_len={config.reuse_len}"
            if split == "validation"
            else f"one batch of {batch_streams} streams x reuse_len={config.reuse_len}"
        )
        fixes = []
        if split == "validation":
            # Documents are held out whole, so the share of tokens follows the share of
            # documents only roughly: scale the current fraction, with a margin.
            if have:
                wanted = manifest.validation_fraction * need / have * 1.25
            else:
                wanted = 1.5 * need / max(total, 1)
            fraction = min(0.5, math.ceil(100 * wanted) / 100)
            most_steps = have // max(batch_streams * config.reuse_len, 1)
            if most_steps >= 1:
                fixes.append(f"--config.eval_steps={most_steps}")
            fixes.append(f"prepare with --validation_fraction={fraction}")
            fixes.append("--config.eval_every=0 (no evaluation)")
        else:
            most_batch = have // max(config.reuse_len, 1) * (2 if config.bi_data else 1)
            if most_batch >= 1 and have >= 2 * config.seq_len:
                fixes.append(f"--config.batch_size <= {most_batch}")
            fixes.append("more text")
        problems.append(
            f"{manifest.path}: the {split!r} split has {have:,} tokens but {reads} read "
            f"{need:,}; use {' or '.join(fixes)}."
        )
    return problems
