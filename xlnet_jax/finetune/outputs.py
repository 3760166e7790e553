"""What a fine-tuning run leaves for a user and a leaderboard, beside its checkpoints.

eval_results.json       {split: {metric: value}} of the final evaluation, and the step
predictions/SPLIT.jsonl one line per example in file order: index, prediction, logits
TASK.tsv                a GLUE test split's submission (index<TAB>prediction)
predictions/SPLIT*.json SQuAD's predictions, null odds and n-best of a split, as the
                        original writes them (Task.submission_files)
finetune.json           the task, its labels and head: what export-hf needs to write the
                        head for HF's matching class (checkpoint/hf.py HEADS)
spiece.model            the tokenizer (its normalisation is in finetune.json)
"""

import json

from xlnet_jax import paths
from xlnet_jax.checkpoint.hf import FINETUNE_FILE, TOKENIZER_FILE

EVAL_RESULTS = "eval_results.json"


def write_json(workdir: str, name: str, value: dict) -> None:
    paths.write_bytes_atomic(
        paths.as_path(workdir) / name, (json.dumps(value, indent=2) + "\n").encode()
    )


def write_predictions(workdir: str, split: str, predictions: list[dict]) -> str:
    """Writes predictions/SPLIT.jsonl; returns its path."""
    path = paths.as_path(workdir) / "predictions" / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(p) + "\n" for p in predictions)
    paths.write_bytes_atomic(path, text.encode())
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
    """finetune.json: {"task", "head", "labels", "data_dir", "init_from"}."""
    write_json(workdir, FINETUNE_FILE, info)
