"""What a checkpoint says about itself: its JSON meta, and whether this config can use it.

The meta item (config, corpus fingerprint, data position, checksums) is parsed as data,
never executed. A step that cannot be read is a `DamagedStep`: the Checkpointer falls back
to an older one, a reader names it.
"""

import json
import time

import ml_collections
from etils import epath

from xlnet_jax.config import ARCHITECTURE_FIELDS
from xlnet_jax.errors import CheckpointError


def make_meta(config: ml_collections.ConfigDict, corpus_fingerprint: str, step: int) -> dict:
    """The JSON side of a checkpoint: config, corpus and data position."""
    return {
        "format_version": 1,
        "config": json.loads(config.to_json_best_effort()),
        "corpus_fingerprint": corpus_fingerprint,
        "data": {"step": step, "seed": config.seed, "global_batch": config.batch_size},
        "saved_at": time.time(),
    }


def check_compatible(meta: dict, config: ml_collections.ConfigDict, fingerprint: str, path) -> None:
    """Refuses a checkpoint made for another architecture or another corpus."""
    saved = meta["config"]
    changed = [
        f"{name}: checkpoint {saved.get(name)!r} vs config {config[name]!r}"
        for name in ARCHITECTURE_FIELDS
        if saved.get(name) != config[name]
    ]
    if changed:
        raise CheckpointError(
            f"{path} was made with a different model config ({'; '.join(changed)}). "
            "Use the checkpoint's values, or start a new run in an empty workdir."
        )
    if meta["corpus_fingerprint"] != fingerprint:
        workdir = epath.Path(path).parent.parent  # path is WORKDIR/checkpoints/STEP
        raise CheckpointError(
            f"{path} was trained on a different corpus (fingerprint "
            f"{meta['corpus_fingerprint'][:12]} vs {fingerprint[:12]}). Point config.corpus_dir "
            "at the original corpus, or continue on the new one in a new workdir from this "
            f"run's params: --workdir NEW_WORKDIR --init_from {workdir}."
        )


def looks_like_meta(meta) -> bool:
    """Whether parsed JSON has the shape make_meta writes (valid JSON can still be garbage)."""
    return (
        isinstance(meta, dict)
        and isinstance(meta.get("config"), dict)
        and isinstance(meta.get("corpus_fingerprint"), str)
    )


class DamagedStep(Exception):
    """One checkpoint step cannot be read; the message says which part and why (one line)."""


def one_line(error: Exception, limit: int = 160) -> str:
    """An exception as `Type: first line`, cut to `limit` characters (tensorstore is verbose)."""
    lines = str(error).strip().splitlines() or [""]
    text = f"{type(error).__name__}: {lines[0]}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
