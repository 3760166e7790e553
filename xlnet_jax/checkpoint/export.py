"""`xlnet-jax export-hf`: a params directory or a train workdir -> a HuggingFace directory."""

import dataclasses
import json

import ml_collections

from xlnet_jax import paths
from xlnet_jax.checkpoint import hf, hf_tokenizer
from xlnet_jax.checkpoint.reader import load_trained_params
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.errors import UsageError

# The dropout XLNet was fine-tuned with in its paper and HF's XLNetConfig default; written
# into the export whatever the run pretrained with (often 0: dropout slows learning early).
FINE_TUNING_DROPOUT = 0.1


def export_to_hf(source: str, out: str, dropout: float = FINE_TUNING_DROPOUT) -> str:
    """Writes `source`'s weights to `out` as transformers.XLNetLMHeadModel loads them.

    `source` is a params directory (from import-hf) or a train workdir, whose newest
    checkpoint is exported together with the run's tokenizer when its corpus is at hand
    (spiece.model, and the HF tokenizer files of its normalisation: hf_tokenizer).
    config.json gets `dropout` for hidden states and attention (HF's `dropout`, our
    `dropatt`), so that `from_pretrained` gives a model ready to fine-tune.

    Returns:
      A line for the user about what was exported.
    """
    if not 0 <= dropout < 1:
        raise UsageError(f"--dropout must be at least 0 and below 1, got {dropout}")
    if not (paths.as_path(source) / "checkpoints").is_dir():
        _refuse_seeds_workdir(source, out)
        config = hf.export_hf(source, out, dropout)
        return f"exported {source} to {out}; {_dropout_note(config, dropout)}"
    config, params, step = load_trained_params(source)
    model_config = ModelConfig.from_config(config)
    finetuned = paths.as_path(source) / hf.FINETUNE_FILE
    if finetuned.is_file():
        return _export_finetuned(source, out, config, model_config, params, step, dropout)
    hf.save_hf(out, model_config, params, dropout)
    note = "no tokenizer copied: the run's corpus_dir is not here"
    first = config.corpus_dir.split(",")[0].strip()  # a mixture's corpora share one tokenizer
    if first and (paths.as_path(first) / "manifest.json").is_file():
        manifest = load_manifest(first)
        tokenizer = paths.as_path(manifest.tokenizer_path)
        tokenizer.copy(paths.as_path(out) / hf.TOKENIZER_FILE, overwrite=True)
        settings = hf_tokenizer.write_tokenizer_files(
            paths.as_path(out),
            manifest.tokenizer_path,
            keep_accents=manifest.keep_accents,
            uncased=manifest.uncased,
        )
        note = f"tokenizer {tokenizer} copied as spiece.model; {settings}"
    return (
        f"exported step {step} of {source} (its newest checkpoint) to {out}; {note}; "
        f"{_dropout_note(model_config, dropout)}"
    )


def _export_finetuned(
    source: str,
    out: str,
    config: ml_collections.ConfigDict,
    model_config: ModelConfig,
    params: dict,
    step: int,
    dropout: float,
) -> str:
    """A fine-tuning workdir's newest checkpoint, with its head and the head's fields of the
    run's `config`, for HF's matching class (hf.HEADS), and the tokenizer the run copied
    into it."""
    info = json.loads((paths.as_path(source) / hf.FINETUNE_FILE).read_text())
    model_config = dataclasses.replace(model_config, dropout=dropout, dropatt=dropout)
    hf.save_hf_head(out, model_config, params, info["head"], info["labels"], config)
    note = "no tokenizer copied: the workdir holds none"
    tokenizer = paths.as_path(source) / info.get("tokenizer", hf.TOKENIZER_FILE)
    if tokenizer.is_file():
        tokenizer.copy(paths.as_path(out) / hf.TOKENIZER_FILE, overwrite=True)
        settings = hf_tokenizer.write_tokenizer_files(
            paths.as_path(out), str(tokenizer), **info.get("normalization", {})
        )
        note = f"tokenizer copied as spiece.model; {settings}"
    hf_class = hf.HEADS[info["head"]].hf_class
    return (
        f"exported step {step} of the {info['task']} fine-tuning {source} to {out} for "
        f"transformers.{hf_class}; {note}; dropout {dropout} in its config.json"
    )


def _dropout_note(config: ModelConfig, dropout: float) -> str:
    pretrained = f"dropout {config.dropout}, dropatt {config.dropatt}"
    return f"dropout {dropout} for fine-tuning (pretrained with {pretrained}; --dropout sets it)"


def _refuse_seeds_workdir(source: str, out: str) -> None:
    """A `finetune --seeds` workdir holds one fine-tuned run per seed (seed_K) and no
    checkpoint of its own: one line naming them, instead of a missing config.json."""
    root = paths.as_path(source)
    if not root.is_dir():
        return
    seeds = sorted(
        (p.name for p in root.iterdir() if p.name.startswith("seed_") and p.is_dir()),
        key=lambda name: (len(name), name),
    )
    if seeds:
        raise UsageError(
            f"{source} is a `finetune --seeds` workdir: export one seed's run, e.g. "
            f"`xlnet-jax export-hf {paths.as_path(source) / seeds[0]} --out {out}` "
            f"(its seed folders: {', '.join(seeds)})"
        )
