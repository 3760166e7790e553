"""Everything a fine-tuning run checks and reads before it compiles or writes anything.

The source of the weights (--init_from: a pretraining workdir's newest checkpoint, an HF
XLNet directory, an import-hf output) fixes the architecture and the tokenizer; every split
is read and tokenized here, so a bad file stops the run in one line before the workdir is
touched.
"""

import dataclasses
import hashlib
import logging
from typing import Any

import ml_collections

from xlnet_jax.checkpoint.meta import ARCHITECTURE_FIELDS
from xlnet_jax.errors import ConfigError, DataError
from xlnet_jax.finetune import config as finetune_config
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.task import Features, Task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.run.init_from import Source, load_source

log = logging.getLogger(__name__)

# Model fields taken from the source besides the architecture: they change what the
# pretrained weights compute.
_FROM_SOURCE = (*ARCHITECTURE_FIELDS, "initializer_range", "layer_norm_eps", "clamp_len")


@dataclasses.dataclass
class Split:
    """One split: its examples in file order and their features."""

    name: str
    examples: list[Any]
    features: Features


@dataclasses.dataclass
class Inputs:
    """What a run starts from: task, labels, source, tokenizer, the config with the source's
    architecture, the splits (train, the labelled eval splits, the test splits present) and
    the --data_dir they were read from.
    """

    task: Task
    labels: list[str]
    source: Source
    encoder: TextEncoder
    config: ml_collections.ConfigDict
    train: Split
    evals: list[Split]
    tests: list[Split]
    data_dir: str

    def fingerprint(self) -> str:
        """A hash of the task, labels and training features: a checkpoint is resumed only
        on the same data (the checkpointer's corpus fingerprint)."""
        digest = hashlib.sha256(f"{self.task.name}|{self.labels}".encode())
        for key in sorted(self.train.features.arrays):
            digest.update(key.encode())
            digest.update(self.train.features.arrays[key].tobytes())
        return "finetune-" + digest.hexdigest()


def load_encoder(source: Source) -> TextEncoder:
    """The source's tokenizer with its normalisation; one line if it has none or its
    vocabulary is not the model's."""
    if source.tokenizer is None:
        raise ConfigError(
            f"--init_from {source.path}: no tokenizer with it (spiece.model or tokenizer.json, "
            "or a pretraining workdir whose corpus is at hand); fine-tuning needs the "
            "tokenizer the model was pretrained with."
        )
    settings = source.normalization or {}
    encoder = TextEncoder(
        source.tokenizer,
        uncased=bool(settings.get("uncased", False)),
        keep_accents=bool(settings.get("keep_accents", False)),
    )
    if encoder.vocab_size != source.model.vocab_size:
        raise ConfigError(
            f"--init_from {source.path}: its tokenizer {source.tokenizer} has "
            f"{encoder.vocab_size} pieces, its model a vocab_size of "
            f"{source.model.vocab_size}; use the tokenizer the model was pretrained with."
        )
    return encoder


def with_source_architecture(
    config: ml_collections.ConfigDict, source: Source
) -> ml_collections.ConfigDict:
    """config with the source's architecture fields (the preset's are replaced)."""
    config = config.copy_and_resolve_references()
    for name in _FROM_SOURCE:
        config[name] = getattr(source.model, name)
    return config


def read_inputs(
    config: ml_collections.ConfigDict, task_name: str, data_dir: str, init_from: str
) -> Inputs:
    """Checks the config, loads the source and reads and tokenizes every split."""
    task = get_task(task_name)
    finetune_config.validate(config)
    if not init_from:
        raise ConfigError("--init_from is required: a pretraining workdir or an HF directory")
    source = load_source(init_from)
    encoder = load_encoder(source)
    config = with_source_architecture(config, source)
    labels = task.labels(data_dir)
    if task.head == "classification" and len(labels) < 2:
        raise DataError(f"{data_dir}: train has {len(labels)} label(s), {labels}; need 2 or more")

    def split(name: str) -> Split:
        examples = task.read(data_dir, name)
        log.info("%s: %d examples", name, len(examples))
        return Split(name, examples, task.featurize(examples, encoder, config, labels))

    train = split("train")
    evals = [split(name) for name in task.eval_splits]
    tests = [split(name) for name in task.test_splits if task.has_split(data_dir, name)]
    return Inputs(task, labels, source, encoder, config, train, evals, tests, data_dir)
