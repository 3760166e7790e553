"""A rerun in a workdir that holds checkpoints continues that run, or is refused in one line.

Resuming restores the saved weights whatever the command line says, so a rerun that asks
for another run would write records (finetune.json, config.json, eval_results.json) that
describe weights the workdir does not hold. Refused, each naming the saved value and the
new one: another --task_name, --init_from or --random_weights than finetune.json records;
other training features (another train file, labels, seq_len, ...: the fingerprint the
checkpoints were made on); a config.num_train_steps below the saved step; checkpoints
without a finetune.json (not a fine-tuning run's workdir). The same command as the saved
run's resumes it (a finished one does nothing: loop.finetune returns its saved results).
A workdir without a checkpoint starts over, whatever it held.
"""

import ml_collections

from xlnet_jax import paths
from xlnet_jax.errors import ConfigError
from xlnet_jax.finetune import outputs
from xlnet_jax.finetune.prepare import Inputs
from xlnet_jax.training import run_config

FRESH = "or start fresh with a new --workdir."

# Config fields that change the training features of a task's text (task featurize).
FEATURE_FIELDS = ("seq_len", "num_segments", "max_qa_length", "max_query_length", "doc_stride")


def same_path(a: str, b: str) -> bool:
    """Whether two --init_from or --data_dir values name the same place."""
    return str(paths.as_path(a)) == str(paths.as_path(b))


def run_info(inputs: Inputs, random_weights: bool) -> dict:
    """What finetune.json records of a run: its task and labels, what it started from and
    on what features; the tokenizer is added where it is copied."""
    return {
        "task": inputs.task.name,
        "head": inputs.task.head,
        "labels": inputs.labels,
        "init_from": str(paths.as_path(inputs.source.path)),
        "random_weights": random_weights,
        "data_dir": str(paths.as_path(inputs.data_dir)),
        "fingerprint": inputs.fingerprint(),
        "normalization": {
            "uncased": inputs.encoder.uncased,
            "keep_accents": inputs.encoder.keep_accents,
        },
    }


def check(workdir: str, inputs: Inputs, random_weights: bool) -> None:
    """Raises ConfigError if `workdir` holds checkpoints of another run than this command's."""
    step = run_config.newest_step(workdir)
    if step is None:
        return
    saved = outputs.read_run_info(workdir)
    if saved is None:
        raise ConfigError(
            f"--workdir={workdir}: it holds checkpoints (step {step}) but no finetune.json, "
            "so not a fine-tuning run's (a pretraining's?); start fresh with a new --workdir."
        )
    problem = _settings_problem(workdir, saved, inputs, random_weights)
    if problem is None and inputs.config.num_train_steps < step:
        problem = (
            f"--config.num_train_steps={inputs.config.num_train_steps} is below step {step}, "
            f"which {workdir} holds: rerun with --config.num_train_steps={step} (or more) to "
            f"evaluate or continue that run; {FRESH}"
        )
    if problem:
        raise ConfigError(problem)


def _settings_problem(
    workdir: str, saved: dict, inputs: Inputs, random_weights: bool
) -> str | None:
    """The refusal line of the first difference between the saved run's finetune.json and
    this command; None if none (a field the file lacks is not compared)."""
    if "task" in saved and saved["task"] != inputs.task.name:
        return (
            f"--task_name={inputs.task.name}: {workdir} was fine-tuned on {saved['task']}; "
            f"rerun with --task_name={saved['task']} to continue it; or start fresh with a new "
            f"--workdir (with --init_from {workdir}: its encoder, fine-tuned on "
            f"{inputs.task.name})."
        )
    if "init_from" in saved and not same_path(saved["init_from"], inputs.source.path):
        return (
            f"--init_from={inputs.source.path}: {workdir} started from {saved['init_from']}; "
            f"rerun with --init_from={saved['init_from']} to continue it; {FRESH}"
        )
    if "random_weights" in saved and saved["random_weights"] != random_weights:
        started = "random weights" if saved["random_weights"] else "pretrained weights"
        flag = "--random_weights" if saved["random_weights"] else "no --random_weights"
        return (
            f"--random_weights={random_weights}: {workdir} started from {started}; "
            f"rerun with {flag} to continue it; {FRESH}"
        )
    if "fingerprint" in saved and saved["fingerprint"] != inputs.fingerprint():
        return (
            f"--data_dir={inputs.data_dir}: its training features are not those {workdir} "
            f"was trained on ({_feature_changes(workdir, saved, inputs)}); rerun with that "
            f"run's data and config to continue it; {FRESH}"
        )
    return None


def _feature_changes(workdir: str, saved: dict, inputs: Inputs) -> str:
    """What changed the training features: data_dir, labels, feature fields, or the file."""
    changes = []
    if "data_dir" in saved and not same_path(saved["data_dir"], inputs.data_dir):
        changes.append(f"data_dir {saved['data_dir']} → {inputs.data_dir}")
    if saved.get("labels", inputs.labels) != inputs.labels:
        changes.append(f"labels {saved['labels']} → {inputs.labels}")
    config: ml_collections.ConfigDict | None = run_config.load(workdir)
    for name in FEATURE_FIELDS:
        if config is not None and name in config and config[name] != inputs.config[name]:
            changes.append(f"config.{name} {config[name]} → {inputs.config[name]}")
    return ", ".join(changes) or "the train split's text changed"
