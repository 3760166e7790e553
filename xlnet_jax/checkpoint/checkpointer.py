"""The Checkpointer: orbax saves that carry the recurrence memory, and safe restore.

A checkpoint step holds three items: `state` (params, optimiser state, step, rng, skipped
steps), `mems` (the recurrence memory, kept apart so a run with a new global batch can
restore everything else) and `meta` (the config, the corpus fingerprint, the data
position and a checksum of every saved array, as JSON: parsed as data, never executed).

The meta and its compatibility rules are in checkpoint_meta.py, the checksums in
checkpoint_checksums.py, single-device reads for export and tests in checkpoint_reader.py.
"""

import logging
import time

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from xlnet_jax import paths
from xlnet_jax.checkpoint import orbax_drain
from xlnet_jax.checkpoint.checksums import tree_checksums, verify_checksums
from xlnet_jax.checkpoint.meta import DamagedStep, check_compatible, looks_like_meta, one_line
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.errors import CheckpointError

log = logging.getLogger(__name__)
orbax_drain.install()  # a fallback from a damaged step prints its warning and nothing else


class Checkpointer:
    """Saves every `checkpoint_every` steps asynchronously, keeps the newest N."""

    def __init__(self, workdir: str, config: ml_collections.ConfigDict):
        self.directory = paths.as_path(workdir) / "checkpoints"
        self.damaged_directory = self.directory.parent / "checkpoints_damaged"
        options = ocp.CheckpointManagerOptions(
            max_to_keep=config.keep_checkpoints,
            enable_async_checkpointing=True,
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "mems", "meta")
        )

    def save(self, state: TrainState, meta: dict) -> None:
        """Starts an async save of `state` at its step (the loop decides when).

        The meta gains a checksum of every saved array, so a restore can tell bit rot from
        a good checkpoint: orbax itself reads a corrupted (not truncated) file silently.
        """
        step = int(jax.device_get(state.step))
        items = _state_items(state)
        meta = {
            **meta,
            "checksums": {"state": tree_checksums(items), "mems": tree_checksums(state.mems)},
        }
        self.manager.save(
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
        """Waits for the in-flight save, then releases orbax's threads."""
        self.manager.wait_until_finished()
        self.manager.close()

    def steps(self) -> list[int]:
        """The finalised steps, oldest first (orbax skips unfinished *.orbax-checkpoint-tmp)."""
        return sorted(self.manager.all_steps())

    def restore(
        self,
        abstract_state: TrainState,
        config: ml_collections.ConfigDict,
        corpus_fingerprint: str,
        *,
        move_damaged: bool = True,
    ) -> TrainState | None:
        """Restores the newest intact step into `abstract_state`'s shardings, or None if empty.

        Steps are tried newest first. A step that cannot be read is only moved aside (to
        checkpoints_damaged/, never deleted) once an older step restores, which proves the
        code and config can read this run's checkpoints; if none restores, nothing is moved
        and the run stops rather than silently starting over. A checkpoint made for another
        model or corpus stops the run at once. Readers that do not own the workdir (eval)
        pass move_damaged=False: the damaged step is named and left where it is.
        """
        self._warn_unfinished_writes()
        steps = self.steps()
        unreadable = []
        for step in reversed(steps):
            state, reason = None, None
            try:
                state = self._restore_step(step, abstract_state, config, corpus_fingerprint)
            except DamagedStep as e:
                reason = str(e)
            if not _on_every_process(reason is None):  # all processes fall back together
                reason = reason or "unreadable on another process"
                log.info(
                    "Checkpoint step %d cannot be restored (%s); trying an older one.", step, reason
                )
                unreadable.append((step, reason))
                continue
            for bad_step, reason in unreadable:
                if move_damaged:
                    self._quarantine(bad_step, reason, fallback=step)
                else:
                    log.warning(
                        "Skipped damaged checkpoint step %d (%s), left in place; using step %d.",
                        bad_step,
                        reason,
                        step,
                    )
            return state
        if unreadable:
            tried = "; ".join(f"step {step}: {reason}" for step, reason in unreadable)
            raise CheckpointError(
                f"No checkpoint in {self.directory} can be restored ({tried}). If the config "
                "changed since they were saved, use the saved one (each step's meta/metadata); "
                "if the files are damaged, restore them from a backup. Nothing was moved."
            )
        self._refuse_to_start_over()
        return None

    def _restore_step(
        self,
        step: int,
        abstract_state: TrainState,
        config: ml_collections.ConfigDict,
        corpus_fingerprint: str,
    ) -> TrainState:
        """One step's state, verified against its checksums; DamagedStep if unreadable."""
        path = self.directory / str(step)
        meta_only = ocp.args.Composite(meta=ocp.args.JsonRestore())
        try:
            meta = self.manager.restore(step, args=meta_only)["meta"]
        except Exception as e:  # noqa: BLE001 - any unreadable metadata means damaged
            raise DamagedStep(f"meta unreadable: {one_line(e)}") from None
        if not looks_like_meta(meta):
            raise DamagedStep("meta is not an xlnet-jax checkpoint's")
        check_compatible(meta, config, corpus_fingerprint, path)
        same_memory = all(
            meta["config"].get(name) == config[name]
            for name in ("batch_size", "mem_len", "n_layer")
        )
        items = _state_items(abstract_state)
        args = {"state": ocp.args.StandardRestore(items)}
        if same_memory:
            args["mems"] = ocp.args.StandardRestore({"mems": abstract_state.mems})
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(**args))
        except Exception as e:  # noqa: BLE001 - truncated or missing array files
            raise DamagedStep(f"arrays unreadable: {one_line(e)}") from None
        checksums = meta.get("checksums", {})
        verify_checksums(restored["state"], checksums.get("state"), "state")
        if not same_memory:
            _warn_memory_restarts(step, meta["config"], config)
            return TrainState(mems=None, **restored["state"])
        mems = restored["mems"]["mems"]
        verify_checksums(mems, checksums.get("mems"), "mems")
        return TrainState(mems=mems, **restored["state"])

    def _warn_unfinished_writes(self) -> None:
        """Names saves that a kill interrupted; orbax ignores them and rewrites that step."""
        if not self.directory.is_dir():
            return
        unfinished = sorted(p.name for p in self.directory.glob(f"*{_TMP_SUFFIX}*"))
        if unfinished:
            log.warning(
                "Ignoring unfinished checkpoint write(s) in %s: %s (the run stopped while "
                "saving; the next save of that step replaces it).",
                self.directory,
                ", ".join(unfinished),
            )

    def _quarantine(self, step: int, reason: str, fallback: int) -> None:
        """Moves a damaged step aside (never deleted) so training can save that step again.

        Only the primary process moves files; every process then reloads the step list.
        """
        source = self.directory / str(step)
        target = self.damaged_directory / f"{step}-{int(time.time())}"
        if jax.process_index() == 0 and source.exists():
            paths.move_tree(source, target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"xlnet-jax quarantine {step}")
        log.warning(
            "Skipped damaged checkpoint step %d (%s): moved %s to %s; resuming from step %d.",
            step,
            reason,
            source,
            target,
            fallback,
        )
        self.manager.reload()

    def _refuse_to_start_over(self) -> None:
        """Stops a fresh start in a workdir whose only checkpoints were moved aside as damaged."""
        moved = sorted(p.name for p in self.damaged_directory.glob("*"))
        if moved:
            raise CheckpointError(
                f"{self.directory} holds no checkpoint, but {self.damaged_directory} holds "
                f"{', '.join(moved)} from this run; refusing to start over from step 0. Move a "
                "good step back into checkpoints/, or move checkpoints_damaged/ away to start "
                "a new run here."
            )


_TMP_SUFFIX = ".orbax-checkpoint-tmp"


def _on_every_process(ok: bool) -> bool:
    """Whether `ok` holds on every process, so all of them take the same branch."""
    if jax.process_count() == 1:
        return ok
    return bool(np.all(multihost_utils.process_allgather(np.int32(ok))))


def _state_items(state: TrainState) -> dict:
    """The `state` item: every TrainState field but the memory (saved as its own item)."""
    return {k: v for k, v in vars(state).items() if k != "mems"}


def _warn_memory_restarts(step: int, saved: dict, config: ml_collections.ConfigDict) -> None:
    """Says why the recurrence memory of `step` is not restored, naming only what changed."""
    changed = ", ".join(
        f"{name} {saved.get(name)} -> {config[name]}"
        for name in ("batch_size", "mem_len", "n_layer", "d_model")
        if saved.get(name) != config[name]
    )
    log.warning(
        "The memory's shape changed since step %d (%s): the recurrence memory restarts from zeros.",
        step,
        changed,
    )
