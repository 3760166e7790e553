"""Orbax checkpoints that carry the recurrence memory, and safe restore.

A checkpoint step holds three items: `state` (params, optimiser state, step, rng, skipped
steps), `mems` (the recurrence memory, kept apart so a run with a new global batch can
restore everything else) and `meta` (the config, the corpus fingerprint and the data
position, as JSON: parsed as data, never executed).
"""

import json
import logging
import pathlib
import shutil
import time

import jax
import ml_collections
import orbax.checkpoint as ocp

from xlnet_jax.train_state import TrainState

log = logging.getLogger(__name__)

# Fields that fix the parameter shapes or the function the params compute.
ARCHITECTURE_FIELDS = (
    "vocab_size",
    "d_model",
    "n_layer",
    "n_head",
    "d_head",
    "d_inner",
    "ff_activation",
    "untie_r",
)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names the path and what to do."""


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
        raise CheckpointError(
            f"{path} was trained on a different corpus (fingerprint "
            f"{meta['corpus_fingerprint'][:12]} vs {fingerprint[:12]}). Point config.corpus_dir "
            "at the original corpus, or start a new run in an empty workdir."
        )


class Checkpointer:
    """Saves every `checkpoint_every` steps asynchronously, keeps the newest N."""

    def __init__(self, workdir: str, config: ml_collections.ConfigDict):
        self.directory = pathlib.Path(workdir).absolute() / "checkpoints"
        options = ocp.CheckpointManagerOptions(
            max_to_keep=config.keep_checkpoints,
            enable_async_checkpointing=True,
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "mems", "meta")
        )

    def save(self, state: TrainState, meta: dict) -> bool:
        """Starts an async save of `state` at its step (the loop decides when)."""
        step = int(jax.device_get(state.step))
        items = {k: v for k, v in vars(state).items() if k != "mems"}
        return self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(items),
                mems=ocp.args.StandardSave({"mems": state.mems}),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )

    def wait(self) -> None:
        """Blocks until the in-flight save is on disk."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def _quarantine(self, step: int, reason: str) -> None:
        """Moves a damaged step aside (never deleted) so training can save that step again."""
        source = self.directory / str(step)
        target = self.directory.parent / "checkpoints_damaged" / f"{step}-{int(time.time())}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.exists():
            shutil.move(str(source), str(target))
        log.warning(
            "Checkpoint step %d at %s is damaged (%s); moved it to %s and fell back.",
            step,
            source,
            reason,
            target,
        )
        self.manager.reload()

    def restore(
        self,
        abstract_state: TrainState,
        config: ml_collections.ConfigDict,
        corpus_fingerprint: str,
    ) -> TrainState | None:
        """Restores the newest intact step into `abstract_state`'s shardings, or None if empty.

        A damaged step is moved aside with a warning and the next older one is tried; if no
        step is intact the run stops rather than silently starting over.
        """
        steps = self.steps()
        for step in reversed(steps):
            path = self.directory / str(step)
            try:
                meta = self.manager.restore(
                    step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
                )["meta"]
            except Exception as e:  # noqa: BLE001 - any unreadable metadata means damaged
                self._quarantine(step, f"metadata unreadable: {type(e).__name__}: {e}")
                continue
            if not isinstance(meta, dict) or "config" not in meta:
                self._quarantine(step, "metadata is not a checkpoint's")
                continue
            check_compatible(meta, config, corpus_fingerprint, path)
            same_memory = (
                meta["config"].get("batch_size") == config.batch_size
                and meta["config"].get("mem_len") == config.mem_len
                and meta["config"].get("n_layer") == config.n_layer
            )
            items = {k: v for k, v in vars(abstract_state).items() if k != "mems"}
            args = {"state": ocp.args.StandardRestore(items)}
            if same_memory:
                args["mems"] = ocp.args.StandardRestore({"mems": abstract_state.mems})
            try:
                restored = self.manager.restore(step, args=ocp.args.Composite(**args))
            except Exception as e:  # noqa: BLE001 - truncated or missing array files
                self._quarantine(step, f"arrays unreadable: {type(e).__name__}: {e}")
                continue
            if same_memory:
                mems = restored["mems"]["mems"]
            else:
                log.warning(
                    "The global batch or memory shape changed since step %d "
                    "(batch_size %s -> %s, mem_len %s -> %s): the recurrence memory restarts "
                    "from zeros.",
                    step,
                    meta["config"].get("batch_size"),
                    config.batch_size,
                    meta["config"].get("mem_len"),
                    config.mem_len,
                )
                mems = None
            return TrainState(mems=mems, **restored["state"])
        if steps:
            raise CheckpointError(
                f"No intact checkpoint in {self.directory} (tried steps {steps}; damaged ones "
                f"were moved to {self.directory.parent / 'checkpoints_damaged'}). Restore a "
                "backup there, or start a new run in an empty workdir."
            )
        return None


def read_checkpoint(workdir: str, step: int | None = None) -> dict:
    """A checkpoint's items on this process's first device, whatever mesh saved them.

    Returns {"step", "state", "mems", "meta"}; for export, inspection and tests.
    """
    directory = pathlib.Path(workdir).absolute() / "checkpoints"
    if not directory.is_dir():
        raise CheckpointError(f"{workdir} holds no checkpoints/ directory; is it a train workdir?")
    manager = ocp.CheckpointManager(
        directory,
        options=ocp.CheckpointManagerOptions(read_only=True),
        item_handlers={
            "state": ocp.StandardCheckpointHandler(),
            "mems": ocp.StandardCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        },
    )
    try:
        step = manager.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"{directory} holds no finished checkpoint yet.")
        here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        metadata = manager.item_metadata(step)
        args = {
            item: ocp.args.StandardRestore(
                jax.tree.map(
                    lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=here),
                    metadata[item],
                )
            )
            for item in ("state", "mems")
        }
        restored = manager.restore(
            step, args=ocp.args.Composite(meta=ocp.args.JsonRestore(), **args)
        )
    finally:
        manager.close()
    return {
        "step": step,
        "state": restored["state"],
        "mems": restored["mems"]["mems"],
        "meta": restored["meta"],
    }


def load_trained_params(workdir: str) -> tuple[ml_collections.ConfigDict, dict]:
    """The config and params of a workdir's newest checkpoint (for export and eval)."""
    checkpoint = read_checkpoint(workdir)
    config = ml_collections.ConfigDict(checkpoint["meta"]["config"])
    config.logical_axis_rules = tuple(
        (name, tuple(axes) if isinstance(axes, list) else axes)
        for name, axes in config.logical_axis_rules
    )
    return config, checkpoint["state"]["params"]
