"""WORKDIR/config.json: the run's resolved config, the default of eval and of a rerun.

`train` writes it once the run's checkpoints accept the config. `eval` and a rerun of
`train` without --config start from it (the CLI passes this file to config_flags with the
workdir as argument: `--config=run_config.py:WORKDIR`), so command-line overrides apply
on top as usual. What differs from the saved run is listed in one line; a rerun refuses
architecture changes and changes the learning-rate schedule only when asked to. The file
also records the package versions the run trains with (run_versions.py), beside the fields.
"""

import json
import os

import ml_collections

from xlnet_jax import paths
from xlnet_jax.config import (
    ARCHITECTURE_FIELDS,
    AUTO_RANGES,
    SCHEDULE_FIELDS,
    data_ranges,
    with_missing_fields,
)
from xlnet_jax.errors import ConfigError
from xlnet_jax.training import optim, run_versions

CONFIG_FILE = "config.json"
VERSIONS_KEY = "versions"  # config.json's one entry that is not a config field


def config_flag(workdir: str) -> str:
    """The --config argument that loads `workdir`'s saved config through this module."""
    return f"--config={os.path.abspath(__file__)}:{workdir}"


def get_config(workdir: str) -> ml_collections.ConfigDict:
    """config_flags' entry point: the saved config of the run in `workdir`."""
    config = load(workdir)
    if config is None:
        raise ConfigError(f"{paths.as_path(workdir) / CONFIG_FILE} not found; pass --config.")
    return config


def _read(workdir: str) -> dict | None:
    """config.json's entries, or None if the run has not saved one."""
    path = paths.as_path(workdir) / CONFIG_FILE
    if not paths.retry(path.is_file, f"looking for {path}"):
        return None
    try:
        return json.loads(paths.retry(path.read_text, f"reading {path}"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} is unreadable ({e}); pass --config instead.") from None


def load(workdir: str) -> ml_collections.ConfigDict | None:
    """The config saved in `workdir`, or None if the run has not saved one."""
    fields = _read(workdir)
    if fields is None:
        return None
    fields.pop(VERSIONS_KEY, None)
    fields = with_missing_fields(fields)
    fields["logical_axis_rules"] = tuple(
        (name, tuple(axes) if isinstance(axes, list) else axes)
        for name, axes in fields["logical_axis_rules"]
    )
    return ml_collections.ConfigDict(fields)


def check_versions(workdir: str, *, allow_change: bool) -> None:
    """Refuses a start whose package versions differ from those `workdir`'s run recorded."""
    fields = _read(workdir)
    recorded = fields.get(VERSIONS_KEY) if fields is not None else None
    source = str(paths.as_path(workdir) / CONFIG_FILE)
    run_versions.check(recorded, source, allow_change=allow_change)


def save(workdir: str, config: ml_collections.ConfigDict) -> None:
    """Writes `workdir`/config.json atomically, with the package versions this process runs."""
    fields = {**_plain(config), VERSIONS_KEY: run_versions.installed()}
    text = json.dumps(fields, indent=2, sort_keys=True) + "\n"
    paths.write_bytes_atomic(paths.as_path(workdir) / CONFIG_FILE, text.encode())


def newest_step(workdir: str) -> int | None:
    """The newest finished checkpoint step in `workdir` (without opening it), or None."""
    directory = paths.as_path(workdir) / "checkpoints"

    def finished() -> list[int]:
        if not directory.is_dir():
            return []
        return [
            int(p.name)
            for p in directory.iterdir()
            if p.name.isdigit() and (p / "_CHECKPOINT_METADATA").exists()
        ]

    return max(paths.retry(finished, f"listing {directory}"), default=None)


def with_data_ranges(
    config: ml_collections.ConfigDict, workdir: str | None, process_count: int
) -> ml_collections.ConfigDict:
    """`config` with data_ranges a number of ranges, before the run saves its config.

    An explicit data_ranges stays. AUTO_RANGES becomes the number that `workdir`'s run
    recorded in its config.json once it has a checkpoint (1 if saved before the field:
    config.with_missing_fields), so
    a resume on another process count reads the same batches; for a run that starts now,
    the ranges of `process_count` processes (xlnet_jax.config.data_ranges).
    """
    if config.data_ranges != AUTO_RANGES:
        return config
    saved = load(workdir) if workdir and newest_step(workdir) is not None else None
    if saved is not None:
        ranges = saved.data_ranges
    else:
        ranges = data_ranges(config, process_count)
    resolved = config.copy_and_resolve_references()
    resolved.data_ranges = ranges
    return resolved


def _plain(config: ml_collections.ConfigDict) -> dict:
    return json.loads(config.to_json_best_effort())


def changes(saved: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> dict:
    """field -> (saved value, new value) for every field that differs, in config order."""
    old, new = _plain(saved), _plain(config)
    return {name: (old.get(name), value) for name, value in new.items() if old.get(name) != value}


def describe(changed: dict, step: int | None) -> str:
    """One line: "changed since step N: batch_size 8 → 16, eval_steps 8 → 2"."""
    since = f"since step {step}" if step is not None else "from the run's config.json"
    listed = ", ".join(f"{name} {old!r} → {new!r}" for name, (old, new) in changed.items())
    return f"changed {since}: {listed}"


def check_rerun(
    saved: ml_collections.ConfigDict,
    config: ml_collections.ConfigDict,
    step: int,
    *,
    change_schedule: bool,
) -> str | None:
    """The line that lists a resumed run's changes, or a ConfigError if one is not allowed.

    Architecture fields never change on resume. Schedule fields change only with
    change_schedule; the line then says what the learning rate does at step `step`.
    """
    changed = changes(saved, config)
    if not changed:
        return None
    fixed = [name for name in ARCHITECTURE_FIELDS if name in changed]
    if fixed:
        raise ConfigError(
            f"config.{fixed[0]}: cannot change when resuming at step {step} "
            f"({describe({n: changed[n] for n in fixed}, step)}); keep the run's values or "
            "start a new run in an empty --workdir (--init_from it to keep its params)."
        )
    line = describe(changed, step)
    schedule = [name for name in SCHEDULE_FIELDS if name in changed]
    if not schedule:
        return line
    before = float(optim.learning_rate_schedule(saved)(step))
    after = float(optim.learning_rate_schedule(config)(step))
    effect = f"the learning rate at step {step} goes from {before:.4g} to {after:.4g}"
    if not change_schedule:
        raise ConfigError(
            f"config.{schedule[0]}: changing {', '.join(schedule)} on resume moves the "
            f"learning-rate schedule ({effect}); pass --change_schedule to accept that, or "
            "keep the run's values."
        )
    return f"{line}; {effect}"
