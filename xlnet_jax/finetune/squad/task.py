"""`--task_name squad`: SQuAD 1.1 / 2.0 and any SQuAD-format set (CMRC 2018, DRCD, KorQuAD).

--data_dir holds the official files (train-v2.0.json and dev-v2.0.json, or the v1.1 pair),
or one json file per split whose name holds "train" / "dev" (cmrc2018_train.json,
KorQuAD_v1.0_dev.json). The training set drops bad questions with a printed count; the dev
set refuses them. Each question becomes one or more windows (windows.py); the loop sees one
feature per window, and `predict` folds them back into one answer per question.
"""

import dataclasses
from collections.abc import Sequence

import jax
import ml_collections
import numpy as np

from xlnet_jax import paths
from xlnet_jax.config import ModelConfig, default_config
from xlnet_jax.data import tokenizer
from xlnet_jax.errors import DataError, MissingFileError
from xlnet_jax.finetune.features import input_spec
from xlnet_jax.finetune.squad import metric, postprocess, reading, windows
from xlnet_jax.finetune.squad.model import SquadModel
from xlnet_jax.finetune.squad.windows import Window
from xlnet_jax.finetune.task import Features, Task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.model.qa_head import qa_losses

_OFFICIAL = {
    "train": ("train-v2.0.json", "train-v1.1.json"),
    "dev": ("dev-v2.0.json", "dev-v1.1.json"),
}


def split_file(data_dir: str, split: str) -> str:
    """The split's json file in data_dir: an official name, else the one *<split>*.json."""
    folder = paths.as_path(data_dir)
    for name in _OFFICIAL[split]:
        if (folder / name).is_file():
            return str(folder / name)
    found = sorted(p.name for p in folder.glob(f"*{split}*.json")) if folder.is_dir() else []
    if len(found) == 1:
        return str(folder / found[0])
    if not found:
        raise MissingFileError(
            f"{data_dir}: no {' or '.join(_OFFICIAL[split])} (nor one *{split}*.json); "
            "--data_dir must hold the SQuAD-format json files."
        )
    raise DataError(f"{data_dir}: several {split} files {found}; keep one, or use official names.")


@dataclasses.dataclass
class SquadFeatures(Features):
    """Features plus the windows they came from (the offsets postprocessing needs)."""

    windows: list[Window] = dataclasses.field(default_factory=list)


class Squad(Task):
    """Span extraction with XLNet's QA head (model/qa_head.py)."""

    name, head = "squad", "question_answering"
    eval_splits = ("dev",)
    network_inputs = ("start_positions",)

    def __init__(self):
        self._files: dict[str, tuple[str, str]] = {}  # split -> (path, version told from it)
        # The SQuAD fields module() and predict() read: featurize's config, else the defaults.
        self._config = default_config()

    def read(self, data_dir: str, split: str) -> list[reading.Question]:
        path = split_file(data_dir, split)
        questions, version = reading.read_squad(path, drop_bad=split == "train")
        self._files[split] = (path, version)
        return questions

    def labels(self, data_dir: str) -> list[str]:
        del data_dir
        return ["answer"]

    def labelled(self, examples: Sequence[reading.Question]) -> bool:
        return all(q.answers or q.is_impossible for q in examples)

    def featurize(
        self,
        examples: Sequence[reading.Question],
        encoder: TextEncoder,
        config: ml_collections.ConfigDict,
        labels: list[str],
    ) -> SquadFeatures:
        del labels
        self._config = config
        for path, version in self._files.values():
            reading.check_version(path, version, self._config.squad_version)
        window_config = windows.WindowConfig(
            seq_len=config.seq_len,
            doc_stride=self._config.doc_stride,
            max_query_length=self._config.max_query_length,
            uncased=encoder.uncased,
            keep_accents=encoder.keep_accents,
        )
        processor = tokenizer.load_processor(encoder.model_path)
        built = windows.question_windows(processor, list(examples), window_config)
        arrays = windows.batch(built, config.seq_len)
        return SquadFeatures(
            arrays={
                "input_ids": arrays["input_ids"][:, None],
                "seg_ids": arrays["seg_ids"][:, None],
                "input_mask": arrays["input_mask"][:, None] > 0,
                **{k: arrays[k] for k in ("start_positions", "end_positions", "is_impossible")},
            },
            example_index=np.array([w.question for w in built], np.int64),
            windows=built,
        )

    def batch_spec(self, config: ml_collections.ConfigDict) -> dict[str, tuple[tuple, str]]:
        labels = {"start_positions": "int32", "end_positions": "int32", "is_impossible": "float32"}
        return {**input_spec(config), **{k: ((), dtype) for k, dtype in labels.items()}}

    def module(self, model: ModelConfig, labels: list[str]) -> SquadModel:
        del labels
        c = self._config
        return SquadModel(model, c.start_n_top, c.end_n_top, c.answer_class_start)

    def loss(self, outputs: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
        return qa_losses(
            outputs["train"],
            batch["start_positions"],
            batch["end_positions"],
            batch["is_impossible"],
        )

    def predict(
        self,
        examples: Sequence[reading.Question],
        features: SquadFeatures,
        outputs: dict[str, dict[str, np.ndarray]],
        labels: list[str],
    ) -> list[dict]:
        del labels
        outputs = outputs["eval"]
        results = [
            postprocess.WindowResult(
                outputs["start_top_log_probs"][n],
                outputs["start_top_index"][n],
                outputs["end_top_log_probs"][n],
                outputs["end_top_index"][n],
                float(outputs["cls_logits"][n]),
            )
            for n in range(len(features))
        ]
        predictions, null_odds, nbest = postprocess.predict(
            list(examples),
            features.windows,
            results,
            n_best_size=self._config.n_best_size,
            max_answer_length=self._config.max_answer_length,
            original=self._config.get("squad_postprocess", "original") == "original",
        )
        return [
            {
                "index": i,
                "id": q.qid,
                "prediction": predictions[q.qid],
                "null_odds": null_odds[q.qid],
                "nbest": nbest[q.qid],
            }
            for i, q in enumerate(examples)
        ]

    def submission_files(self, split: str, predictions: list[dict]) -> list[tuple[str, str]]:
        """predictions/<split>.json, <split>_null_odds.json and <split>_nbest.json of every
        evaluated split (postprocess.prediction_files)."""
        files = postprocess.prediction_files(
            split,
            {p["id"]: p["prediction"] for p in predictions},
            {p["id"]: p["null_odds"] for p in predictions},
            {p["id"]: p["nbest"] for p in predictions},
        )
        return [(f"predictions/{name}", text) for name, text in files]

    def metrics(
        self, examples: Sequence[reading.Question], predictions: list[dict]
    ) -> dict[str, float]:
        return metric.evaluate(
            {q.qid: q.answers for q in examples},
            {p["id"]: p["prediction"] for p in predictions},
            {p["id"]: p["null_odds"] for p in predictions},
            original=self._config.get("squad_postprocess", "original") == "original",
        )
