"""What a fine-tuning run leaves for a user and a leaderboard, beside its checkpoints.

eval_results.json       {split: {metric: value}} of the final evaluation, and the step
predictions/SPLIT.jsonl one line per example in file order: index, prediction, logits
TASK.tsv                a GLUE test split's submission (index<TAB>prediction)
predictions/SPLIT*.json SQuAD's predictions, null odds and n-best of a split, as the
                        original writes them (Task.submission_files)
finetune.json           the task, its labels and head: what export-hf needs to write the
                        head for HF's matching class (checkpoint/hf.py HEADS); and what the
                        run started from, which a rerun must match (rerun.py)
spiece.model            the tokenizer (its normalisation is in finetune.json)

Every JSON file is strict JSON: a metric or logit that is NaN or infinite is written as
null, and a JSON object's "non_finite" entry names each such value and what it was
({"dev/pearson": "NaN"}), so no reader meets a bare NaN.
"""

import json
import logging
import math
from typing import Any

import numpy as np

from xlnet_jax import paths
from xlnet_jax.checkpoint.hf import FINETUNE_FILE, TOKENIZER_FILE
from xlnet_jax.errors import DataError

log = logging.getLogger(__name__)

EVAL_RESULTS = "eval_results.json"
NON_FINITE_KEY = "non_finite"


def finite(value: Any, where: str = "") -> tuple[Any, dict[str, str]]:
    """`value` with each NaN or infinite float (nested in dicts and lists) replaced by None,
    and {"key/key/index": "NaN" | "Infinity" | "-Infinity"} of those replaced."""
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        return None, {where: json.dumps(float(value))}
    found: dict[str, str] = {}
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[key], bad = finite(item, f"{where}/{key}" if where else str(key))
            found.update(bad)
        return out, found
    if isinstance(value, list | tuple):
        out = []
        for index, item in enumerate(value):
            clean, bad = finite(item, f"{where}/{index}" if where else str(index))
            out.append(clean)
            found.update(bad)
        return out, found
    return value, found


def to_json(value: dict, **dumps) -> str:
    """Strict JSON of a dict: non-finite floats as null, named under "non_finite"."""
    clean, bad = finite(value)
    if bad:
        clean[NON_FINITE_KEY] = bad
    return json.dumps(clean, allow_nan=False, **dumps)


def write_json(workdir: str, name: str, value: dict) -> None:
    """Writes `value` to WORKDIR/name atomically, as to_json; a non-finite value is logged."""
    _, bad = finite(value)
    if bad:
        log.warning(
            "%s: %s not finite, written as null (a correlation of a split whose gold labels "
            "or predictions are all equal is NaN; a NaN loss means a NaN label or diverged "
            "weights).",
            name,
            ", ".join(f"{where} was {what}" for where, what in bad.items()),
        )
    paths.write_bytes_atomic(
        paths.as_path(workdir) / name, (to_json(value, indent=2) + "\n").encode()
    )


def write_predictions(workdir: str, split: str, predictions: list[dict]) -> str:
    """Writes predictions/SPLIT.jsonl, one to_json line per prediction (a non-finite logit
    is null, named in its line's "non_finite", and counted in the log); returns its path."""
    path = paths.as_path(workdir) / "predictions" / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [to_json(prediction) + "\n" for prediction in predictions]
    count = sum(bool(finite(prediction)[1]) for prediction in predictions)
    if count:
        log.warning(
            "%s: %d predictions hold a NaN or infinite value, written as null.", path, count
        )
    paths.write_bytes_atomic(path, "".join(lines).encode())
    return str(path)


def write_submission(workdir: str, name: str, text: str) -> str:
    """Writes one of a task's submission files (`name` relative to the workdir); its path."""
    path = paths.as_path(workdir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.write_bytes_atomic(path, text.encode())
    return str(path)


def copy_tokenizer(workdir: str, model_path: str) -> str:
    """Copies the tokenizer into the workdir (export-hf takes it from there); its name."""
    paths.as_path(model_path).copy(paths.as_path(workdir) / TOKENIZER_FILE, overwrite=True)
    return TOKENIZER_FILE


def write_run_info(workdir: str, info: dict) -> None:
    """finetune.json: {"task", "head", "labels", "init_from", "random_weights", "data_dir",
    "fingerprint", "tokenizer", "normalization"}."""
    write_json(workdir, FINETUNE_FILE, info)


def read_run_info(workdir: str) -> dict | None:
    """finetune.json's entries, or None if the workdir has none."""
    path = paths.as_path(workdir) / FINETUNE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise DataError(
            f"{path}: not JSON ({e}); restore it, or start fresh with a new --workdir"
        ) from None
