"""What a fine-tuning task provides: the one interface the loop, the CLI and export rely on.

A task reads its files (`read`), turns examples into fixed-shape rows (`featurize`), names
the network that scores them (`module`), its loss, and how outputs become predictions,
official metrics and submission files. The fine-tuning program (finetune/train.py) knows
nothing else about a task; a new task (SQuAD, a new GLUE-like set) is one subclass plus one line in
finetune/registry.py.

Shapes. Features are numpy arrays with a leading feature axis N (one feature per example,
or several: SQuAD's windows). The three input arrays `input_ids`, `seg_ids` (int32) and
`input_mask` (bool, True at padding) are [N, S, *rows, L]: S segments of one text read in
order through the recurrence memory (S = config.num_segments; 1 as the original), *rows
any per-feature rows (RACE: the options), L = config.seq_len. For one segment the loop
flattens [B, *rows, L] to [B * prod(rows), L], calls the module with memory, and gives the
module's outputs of the LAST segment back reshaped to [B, *rows, ...]. The arrays a task
names in `network_inputs` ([N, ...], e.g. SQuAD's gold starts) reach the module as keyword
arguments, the batch's [B, ...] slice repeated over the rows ([B * prod(rows), ...]), in
every segment's call. Every array of a feature but the three inputs (labels, ...) reaches
`loss` as the batch's [B, ...] slice.
"""

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from xlnet_jax.config import ModelConfig
from xlnet_jax.finetune.text import TextEncoder

INPUT_KEYS = ("input_ids", "seg_ids", "input_mask")


@dataclasses.dataclass
class Features:
    """A split's model inputs.

    arrays: INPUT_KEYS ([N, S, *rows, L]) and the task's own fields ([N, ...]).
    example_index: int [N], the example (in file order) each feature belongs to.
    """

    arrays: dict[str, np.ndarray]
    example_index: np.ndarray

    def __len__(self) -> int:
        return len(self.example_index)


class Task(abc.ABC):
    """One fine-tuning task. Class attributes:

    name: the --task_name (lower case, as the original's).
    head: how export-hf writes the head (a key of checkpoint.hf.HEADS).
    eval_splits: the labelled splits evaluated, e.g. ("dev",), ("dev_matched", "dev_mismatched").
    test_splits: unlabelled splits predicted when their files exist (GLUE: ("test",)).
    network_inputs: the feature arrays besides INPUT_KEYS that the network reads, passed to
      `module` as keyword arguments of the same names (SQuAD: ("start_positions",)).
    """

    name: str
    head: str
    eval_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ()
    network_inputs: tuple[str, ...] = ()

    @abc.abstractmethod
    def read(self, data_dir: str, split: str) -> list[Any]:
        """The split's examples in file order. Raises DataError (one line: file, line and what
        was expected) for a missing file, a wrong column count, an unknown label or an
        empty split."""

    def has_split(self, data_dir: str, split: str) -> bool:
        """Whether an optional split's files exist (test_splits); none by default."""
        del data_dir, split
        return False

    @abc.abstractmethod
    def labels(self, data_dir: str) -> list[str]:
        """The output names (classes; one name for a score or a choice), fixed per task or
        read from the training data (generic classification): written with the head."""

    @abc.abstractmethod
    def featurize(
        self,
        examples: Sequence[Any],
        encoder: TextEncoder,
        config: ml_collections.ConfigDict,
        labels: list[str],
    ) -> Features:
        """Tokenized, fixed-shape features of the examples (see the module docstring)."""

    @abc.abstractmethod
    def module(self, model: ModelConfig, labels: list[str]) -> nn.Module:
        """The network: (input_ids, seg_ids, input_mask [R, L], mems, mem_mask,
        deterministic=, **network_inputs [R, ...]) -> (outputs pytree with leading R,
        new_mems, new_mem_mask)."""

    @abc.abstractmethod
    def loss(self, outputs: Any, batch: dict[str, jax.Array]) -> jax.Array:
        """Per-feature losses [B] (the loop weights out padding features and averages)."""

    @abc.abstractmethod
    def predict(
        self, examples: Sequence[Any], features: Features, outputs: Any, labels: list[str]
    ) -> list[dict]:
        """One record per example in file order: {"index", "prediction", ...} (the outputs
        are numpy, [N, ...], in feature order)."""

    @abc.abstractmethod
    def metrics(self, examples: Sequence[Any], predictions: list[dict]) -> dict[str, float]:
        """The official metrics of a labelled split (the loop asks for the eval splits, and
        for a test split only when `labelled` says its examples carry labels)."""

    def labelled(self, examples: Sequence[Any]) -> bool:
        """Whether these examples carry gold labels (RACE's test split does)."""
        return all(getattr(e, "label", None) is not None for e in examples)

    def batch_spec(self, config: ml_collections.ConfigDict) -> dict[str, tuple[tuple, str]]:
        """{name: (shape without the batch axis, dtype)} of a batch's arrays but "weight":
        what `compile` and the benchmarks build a batch from without data."""
        raise NotImplementedError(f"{self.name}: no batch_spec; compile needs one")

    def submission_files(self, split: str, predictions: list[dict]) -> list[tuple[str, str]]:
        """(file name in the workdir, text) of each file a split's predictions make for a
        leaderboard or an official script (GLUE: <TASK>.tsv of a test split; SQuAD: the
        prediction, null-odds and n-best json of dev); none by default."""
        del split, predictions
        return []
