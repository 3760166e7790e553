"""`train --init_from PATH`: a new run that starts from another model's params.

PATH (local or gs://) is an HF XLNetLMHeadModel directory (as `import-hf` reads it:
model.safetensors, or a weights-only pytorch_model.bin), an `import-hf` output
(params.safetensors), or another run's workdir (its newest checkpoint). A fine-tuning
workdir (finetune.json) gives its encoder alone, with the tokenizer it copied, for
`finetune --init_from` (continue on another task); it has no LM head to pretrain from.
Only the params are taken: the step, the optimizer state and the recurrence memory start
fresh, as in any new run.

The config's architecture fields must equal the source's (the error names each one).
The source's tokenizer, when it has one (an HF directory's or a params directory's
spiece.model, or the model converted from its tokenizer.json: data/spm_source.py; a
workdir's corpus tokenizer), must tokenize as the corpus's (spm_fingerprint: the same
pieces, scores and normalisation): token ids mean nothing under another vocabulary, so a
mismatch is refused; a source without one is warned about.
So must its normalisation (keep_accents, uncased: tokenizer_config.json, or the workdir's
corpus manifest): the same vocabulary sees other text under another one.
"""

import dataclasses
import json
import logging

import jax
import ml_collections
import numpy as np

from xlnet_jax import paths
from xlnet_jax.checkpoint import hf
from xlnet_jax.checkpoint.reader import load_trained_params
from xlnet_jax.config import ARCHITECTURE_FIELDS, ModelConfig
from xlnet_jax.data import spm_source
from xlnet_jax.data.manifest import Manifest, load_manifest
from xlnet_jax.data.spm_source import spm_fingerprint
from xlnet_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Source:
    """Params to start from: where they come from, their model config and tokenizer."""

    path: str
    kind: str  # "HF directory", "params directory", "workdir" or "fine-tuned (TASK) workdir"
    model: ModelConfig
    params: dict  # XLNetLM's; a fine-tuned workdir's encoder ("transformer")
    tokenizer: str | None
    normalization: dict | None = None  # {"keep_accents", "uncased"}, with the tokenizer
    step: int | None = None  # a workdir's checkpoint step


def load_source(path: str) -> Source:
    """Reads the params of an HF directory, a params directory or a train workdir, local or
    on object storage (gs://)."""
    root = paths.as_path(path)
    if not root.is_dir():
        raise ConfigError(f"--init_from {path}: no such directory.")
    if (root / "checkpoints").is_dir():
        config, params, step = load_trained_params(path)
        if (root / hf.FINETUNE_FILE).is_file():
            return _finetuned_source(path, config, params, step)
        tokenizer = normalization = None
        # a mixture's corpora share one tokenizer: the first one's
        first = config.corpus_dir.split(",")[0].strip()
        if first and (paths.as_path(first) / "manifest.json").is_file():
            corpus = load_manifest(first)
            tokenizer, normalization = corpus.tokenizer_path, _settings(corpus)
        model = ModelConfig.from_config(config)
        return Source(path, "workdir", model, params, tokenizer, normalization, step)
    if (root / "params.safetensors").is_file():
        model, params = hf.load_params_dir(root)
        kind = "params directory"
    else:
        model, params = hf.load_hf(root)
        kind = "HF directory"
    tokenizer = spm_source.find_spm_model(root)  # spiece.model, or from tokenizer.json
    if tokenizer is None:
        return Source(path, kind, model, params, None)
    return Source(path, kind, model, params, tokenizer, spm_source.read_settings(root))


def _finetuned_source(
    path: str, config: ml_collections.ConfigDict, params: dict, step: int
) -> Source:
    """A fine-tuning workdir as a source: its encoder (the task's head is left behind), the
    tokenizer it copied (spiece.model) and the normalisation finetune.json records."""
    root = paths.as_path(path)
    try:
        info = json.loads((root / hf.FINETUNE_FILE).read_text())
    except ValueError as e:
        raise DataError(f"{root / hf.FINETUNE_FILE}: not JSON ({e})") from None
    tokenizer = spm_source.find_spm_model(root)
    normalization = info.get("normalization") if tokenizer else None
    model = ModelConfig.from_config(config)
    kind = f"fine-tuned ({info.get('task', 'a task')}) workdir"
    return Source(path, kind, model, params["transformer"], tokenizer, normalization, step)


def check_source(source: Source, config: ml_collections.ConfigDict, manifest: Manifest) -> None:
    """Refuses another architecture or another tokenizer than the run's, in one line."""
    architecture = architecture_problem(source, config)
    if architecture:
        raise ConfigError(architecture)
    tokenizer = tokenizer_problem(source, manifest)
    if tokenizer:
        raise DataError(tokenizer)


def architecture_problem(source: Source, config: ml_collections.ConfigDict) -> str | None:
    """The line naming the architecture fields in which the config differs from the source."""
    differ = [name for name in ARCHITECTURE_FIELDS if getattr(source.model, name) != config[name]]
    if not differ:
        return None
    wanted = " ".join(f"--config.{n}={getattr(source.model, n)}" for n in differ)
    got = ", ".join(f"{n}={config[n]!r}" for n in differ)
    return (
        f"--init_from {source.path}: its architecture differs in "
        f"{', '.join(differ)} (the config has {got}); pass {wanted}."
    )


def tokenizer_problem(source: Source, manifest: Manifest) -> str | None:
    """The line refusing a source whose tokenizer or normalisation is not the corpus's.

    A source without a tokenizer is warned about, not refused.
    """
    if source.tokenizer is None:
        log.warning(
            "--init_from %s: it has no %s or %s to compare with the corpus's tokenizer; make "
            "sure %s was prepared with the tokenizer these params were trained with.",
            source.path,
            spm_source.SPIECE_FILE,
            spm_source.JSON_FILE,
            manifest.path,
        )
        return None
    if spm_fingerprint(source.tokenizer) != spm_fingerprint(manifest.tokenizer_path):
        return (
            f"--init_from {source.path}: its tokenizer {source.tokenizer} is not the one "
            f"{manifest.path} was prepared with; prepare the corpus again with "
            f"`xlnet-jax prepare --spm_model {source.tokenizer} ...`."
        )
    if source.normalization not in (None, _settings(manifest)):
        flags = "".join(f" --{k}" for k, on in source.normalization.items() if on)
        return (
            f"--init_from {source.path}: its text was normalised with {source.normalization}, "
            f"{manifest.path} with {_settings(manifest)}; prepare the corpus again with "
            f"`xlnet-jax prepare --spm_model {source.tokenizer}{flags} ...`."
        )
    return None


def _settings(manifest: Manifest) -> dict:
    """The normalisation settings a source and a corpus must share."""
    return {"keep_accents": manifest.keep_accents, "uncased": manifest.uncased}


def place_params(params: dict, shardings) -> dict:
    """Host params -> global arrays in the run's param shardings (any process count)."""

    def place(array, sharding):
        array = np.asarray(array, np.float32)
        return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

    return jax.tree.map(place, params, shardings)
