"""RACE: reading comprehension with four options, each scored by the same head.

The release's layout: --data_dir/{train,dev,test}/{middle,high}/ with one JSON file per
article ({"article", "questions", "options" (4 per question), "answers" ("A".."D"), "id"}).
Each option becomes one row as the original's run_race.py builds it: the article, <sep>, the
question with the option put in place of "_" (or appended after a space), <sep>, <cls>; the
question-and-option part keeps its last max_qa_length tokens, the article its first tokens
that fit. (The original appends to the article's token list in place, so that from the
second option on its rows carry the earlier options' tokens; every row here is built anew.)
A softmax over the four rows' logits picks the answer. Passages longer than one row are
read through the recurrence memory (config.num_segments).
"""

import dataclasses
import json
from collections.abc import Sequence

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import optax

from xlnet_jax import paths
from xlnet_jax.config import ModelConfig
from xlnet_jax.errors import DataError, MissingFileError
from xlnet_jax.finetune import features, metrics
from xlnet_jax.finetune.task import Features, Task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.model.heads import SequenceHead

LEVELS = ("middle", "high")
CHOICES = "ABCD"
_LAYOUT = "RACE's layout: SPLIT/{middle,high}/ARTICLE.txt, each a JSON object"


@dataclasses.dataclass(frozen=True)
class RaceExample:
    """One question: index "LEVEL/FILE:QUESTION", label 0-3 (None if the file has none)."""

    index: str
    article: str
    question: str
    options: tuple[str, ...]
    label: int | None
    level: str


def _question_examples(path: str, level: str, data: dict) -> list[RaceExample]:
    """The examples of one article file, checking its fields."""
    for key in ("article", "questions", "options"):
        if key not in data:
            raise DataError(f"{path}: no {key!r} field (expected {_LAYOUT})")
    questions, options = data["questions"], data["options"]
    answers = data.get("answers")
    if len(options) != len(questions) or (answers is not None and len(answers) != len(questions)):
        raise DataError(
            f"{path}: {len(questions)} questions, {len(options)} option lists and "
            f"{len(answers or [])} answers; expected one of each per question"
        )
    examples = []
    for i, question in enumerate(questions):
        if len(options[i]) != len(CHOICES):
            raise DataError(f"{path}: question {i + 1} has {len(options[i])} options, expected 4")
        label = None
        if answers is not None:
            if answers[i] not in CHOICES:
                raise DataError(
                    f"{path}: answer {i + 1} is {answers[i]!r}, expected one of A B C D"
                )
            label = CHOICES.index(answers[i])
        name = f"{level}/{paths.as_path(path).name}:{i}"
        examples.append(
            RaceExample(name, data["article"], question, tuple(options[i]), label, level)
        )
    return examples


class Race(Task):
    name, head = "race", "multiple_choice"
    eval_splits = ("dev",)
    test_splits = ("test",)

    def has_split(self, data_dir: str, split: str) -> bool:
        return any((paths.as_path(data_dir) / split / level).is_dir() for level in LEVELS)

    def labels(self, data_dir: str) -> list[str]:
        del data_dir
        return list(CHOICES)

    def read(self, data_dir: str, split: str) -> list[RaceExample]:
        examples = []
        for level in LEVELS:
            folder = paths.as_path(data_dir) / split / level
            if not folder.is_dir():
                raise MissingFileError(f"{folder}: not found (expected {_LAYOUT})")
            for file in sorted(folder.iterdir(), key=lambda p: p.name):
                try:
                    data = json.loads(file.read_text(encoding="utf-8"))
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise DataError(
                        f"{file}: not a JSON object ({e}; expected {_LAYOUT})"
                    ) from None
                if not isinstance(data, dict):
                    raise DataError(f"{file}: not a JSON object (expected {_LAYOUT})")
                examples += _question_examples(str(file), level, data)
        if not examples:
            raise DataError(f"{paths.as_path(data_dir) / split}: no questions (expected {_LAYOUT})")
        return examples

    def featurize(
        self,
        examples: Sequence[RaceExample],
        encoder: TextEncoder,
        config: ml_collections.ConfigDict,
        labels: list[str],
    ) -> Features:
        del labels
        capacity = config.seq_len * config.num_segments
        articles = {text: None for text in (e.article for e in examples)}
        articles = dict(zip(articles, encoder.encode_many(list(articles)), strict=True))
        rows = []
        for example in examples:
            qas = [
                example.question.replace("_", option) if "_" in example.question
                else f"{example.question} {option}"
                for option in example.options
            ]  # fmt: skip
            options = []
            for qa in encoder.encode_many(qas):
                qa = qa[-config.max_qa_length :]
                context = articles[example.article][: max(capacity - 3 - len(qa), 0)]
                options.append(features.pair_row(context, qa, config.seq_len, config.num_segments))
            rows.append(tuple(np.stack(parts, axis=1) for parts in zip(*options, strict=True)))
        arrays = features.stack_rows(rows)
        arrays["label"] = np.array([e.label or 0 for e in examples], np.int32)
        return Features(arrays, np.arange(len(examples)))

    def module(self, model: ModelConfig, labels: list[str]) -> nn.Module:
        del labels
        return SequenceHead(model, 1)

    def batch_spec(self, config: ml_collections.ConfigDict) -> dict[str, tuple[tuple, str]]:
        return {**features.input_spec(config, (len(CHOICES),)), "label": ((), "int32")}

    def loss(self, outputs: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(outputs[..., 0], batch["label"])

    def predict(
        self,
        examples: Sequence[RaceExample],
        features: Features,
        outputs: np.ndarray,
        labels: list[str],
    ) -> list[dict]:
        del features
        return [
            {"index": e.index, "prediction": labels[int(np.argmax(logits[:, 0]))],
             "logits": logits[:, 0].tolist()}
            for e, logits in zip(examples, outputs, strict=True)
        ]  # fmt: skip

    def metrics(self, examples: Sequence[RaceExample], predictions: list[dict]) -> dict[str, float]:
        gold = np.array([CHOICES[e.label] for e in examples])
        predicted = np.array([p["prediction"] for p in predictions])
        levels = np.array([e.level for e in examples])
        result = {"accuracy": metrics.accuracy(gold, predicted)}
        for level in LEVELS:
            if (levels == level).any():
                result[f"accuracy_{level}"] = metrics.accuracy(
                    gold[levels == level], predicted[levels == level]
                )
        return result
