"""Tasks on one text or a pair of texts: classification (a label) or regression (a score).

Every GLUE task and the generic `classification` and `regression` are PairTasks: they differ
only in how their files are read (a subclass's `read`) and which metrics they report.
"""

import dataclasses
import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from xlnet_jax.config import ModelConfig
from xlnet_jax.errors import DataError
from xlnet_jax.finetune import features, metrics
from xlnet_jax.finetune.task import Features, Task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.model.heads import SequenceHead


@dataclasses.dataclass(frozen=True)
class PairExample:
    """One line of a classification or regression file.

    index: the test file's index column, else the example's 0-based position in its file.
    label: the label name, the score (regression), or None (a test split).
    where: "file:line", for messages.
    """

    index: str
    text_a: str
    text_b: str | None
    label: str | float | None
    where: str


def finite_score(text: str, where: str, context: str = "") -> float:
    """A regression label read as a float; a DataError at `where` ("file:line") when it is
    not a number or not a finite one (nan and inf would train on a non-finite loss)."""
    try:
        score = float(text)
    except ValueError:
        raise DataError(f"{where}: score {text!r} is not a number{context}") from None
    if not math.isfinite(score):
        raise DataError(
            f"{where}: score {text!r} is not a finite number{context}; give the example a "
            "real score or leave its line out"
        )
    return score


class PairTask(Task):
    """Classification (head "classification") or regression (head "regression") of texts.

    Class attributes beyond Task's: metric, the classification metric set
    (metrics.classification_metrics: "accuracy", "matthews", "f1_accuracy"); regression
    tasks report Pearson and Spearman.
    """

    metric: str = "accuracy"

    @property
    def regression(self) -> bool:
        return self.head == "regression"

    def featurize(
        self,
        examples: Sequence[PairExample],
        encoder: TextEncoder,
        config: ml_collections.ConfigDict,
        labels: list[str],
    ) -> Features:
        texts_a = encoder.encode_many([e.text_a for e in examples])
        with_b = [e.text_b for e in examples if e.text_b is not None]
        texts_b = iter(encoder.encode_many(with_b))
        rows = [
            features.pair_row(a, None if e.text_b is None else next(texts_b), config.seq_len,
                              config.num_segments)
            for e, a in zip(examples, texts_a, strict=True)
        ]  # fmt: skip
        arrays = features.stack_rows(rows)
        if self.regression:
            arrays["label"] = np.array([e.label or 0.0 for e in examples], np.float32)
        else:
            ids = {name: i for i, name in enumerate(labels)}
            arrays["label"] = np.array([ids.get(e.label, 0) for e in examples], np.int32)
        return Features(arrays, np.arange(len(examples)))

    def module(self, model: ModelConfig, labels: list[str]) -> nn.Module:
        return SequenceHead(model, 1 if self.regression else len(labels))

    def batch_spec(self, config: ml_collections.ConfigDict) -> dict[str, tuple[tuple, str]]:
        label = ((), "float32" if self.regression else "int32")
        return {**features.input_spec(config), "label": label}

    def loss(self, outputs: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
        if self.regression:
            return jnp.square(outputs[:, 0] - batch["label"])
        return optax.softmax_cross_entropy_with_integer_labels(outputs, batch["label"])

    def predict(
        self,
        examples: Sequence[PairExample],
        features: Features,
        outputs: np.ndarray,
        labels: list[str],
    ) -> list[dict]:
        records = []
        for example, logits in zip(examples, outputs, strict=True):
            prediction = float(logits[0]) if self.regression else labels[int(np.argmax(logits))]
            records.append(
                {"index": example.index, "prediction": prediction, "logits": logits.tolist()}
            )
        return records

    def metrics(self, examples: Sequence[PairExample], predictions: list[dict]) -> dict[str, float]:
        gold = [e.label for e in examples]
        predicted = [p["prediction"] for p in predictions]
        if self.regression:
            return metrics.regression_metrics(gold, predicted)
        return metrics.classification_metrics(self.metric, gold, predicted)
