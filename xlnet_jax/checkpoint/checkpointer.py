"""The Checkpointer: orbax saves that carry the recurrence memory, and safe restore.

A checkpoint step holds three items: `state` (params, optimiser state, step, rng, skipped
steps), `mems` (the recurrence memory, kept apart so a run with a new global batch can
restore everything else) and `meta` (the config, the corpus fingerprint, the data
position and a checksum of every saved array, as JSON: parsed as data, never executed).

The meta and its compatibility rules are in meta.py, the checksums in checksums.py,
single-device reads for export and tests in reader.py.

Saves never hang the loop; each phase has a deadline from paths.RetryPolicy or the config:
- the synchronous phase (orbax's directories and metadata, before save() returns) runs
  under the policy's budget_s: its requests stop retrying then, each cut after at most
  request_timeout_s;
- the asynchronous write and its finalise (the arrays, the metadata, the commit marker) are
  waited for at most config.save_wait_s, before the next save starts (or the run stops or exits);
- the check that a step is complete (its marker) runs under paths.retry, within budget_s.
A save that fails, or is still writing after save_wait_s, is reported in one line and
training goes on, saving again at the next interval, until config.failed_saves saves in a row
failed: then the run stops naming the newest complete step. orbax marks a step complete
only once all of it is written (a rename, or commit_success.txt on object storage, written
last), so a failed or given-up save leaves no step that restores as complete. tensorstore's
gcs driver retries each request with the policy's attempts and delays
(tensorstore_adapter.py). In a training run on gs://, every write is also bounded by the
workdir lease (run/fence.py): a save in flight when the lease can no longer be counted on
dies uncommitted with its process.

orbax-checkpoint 0.12.8 raises a failed commit (e.g. a commit_success.txt write that
failed) from `wait_until_finished`: _settle reports it as a failed save. Process 0 also
checks the marker itself after a save that raised nothing, since on gs:// a save was seen
to end neither committed nor failed (issue 35's e2e flake). Only steps seen complete count
towards `keep_checkpoints` (_KeepNewestComplete): a failed save never costs a good step, and
the step a save replaces is deleted by the save after it, once the new one is known
complete.
"""

import dataclasses
import logging
import math
import re
import time

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from xlnet_jax import paths
from xlnet_jax.checkpoint import orbax_adapter, tensorstore_adapter
from xlnet_jax.checkpoint.checksums import tree_checksums, verify_checksums
from xlnet_jax.checkpoint.meta import DamagedStep, check_compatible, looks_like_meta
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.errors import CheckpointError, SavesFailedError, one_line

log = logging.getLogger(__name__)


class _KeepNewestComplete(ocp.checkpoint_managers.PreservationPolicy):
    """Keeps the newest `n` steps known complete, and every step not yet known complete
    (the save in flight, or one that failed): orbax deletes only what this lets go."""

    def __init__(self, n: int, complete: set[int]):
        self.n, self.complete = n, complete

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        del context
        newest = sorted(c.step for c in checkpoints if c.step in self.complete)[-self.n :]
        return [c.step not in self.complete or c.step in newest for c in checkpoints]


class Checkpointer:
    """Saves every `checkpoint_every` steps asynchronously, keeps the newest N complete."""

    def __init__(self, workdir: str, config: ml_collections.ConfigDict):
        self.directory = paths.as_path(workdir) / "checkpoints"
        self.damaged_directory = self.directory.parent / "checkpoints_damaged"
        self._policy = paths.retry_policy()
        self._save_wait_s, self._failed_saves = config.save_wait_s, config.failed_saves
        tensorstore_adapter.use_gcs_retries(self._policy)
        orbax_adapter.drain_sync_loops()  # a fallback from a damaged step prints one warning
        self._complete: set[int] = set()  # steps seen finalised: listed, or checked after a save
        # The step's directories are made in save() itself: made in the background, a
        # failure there leaves orbax's other save threads waiting 300 s for its signal.
        options = ocp.CheckpointManagerOptions(
            preservation_policy=_KeepNewestComplete(config.keep_checkpoints, self._complete),
            enable_async_checkpointing=True,
            async_options=ocp.AsyncOptions(
                timeout_secs=max(1, math.ceil(self._save_wait_s)),
                create_directories_asynchronously=False,
            ),
        )
        self.manager = paths.retry(
            lambda: ocp.CheckpointManager(
                self.directory, options=options, item_names=("state", "mems", "meta")
            ),
            f"listing the checkpoints in {self.directory}",
        )
        self._complete.update(self.manager.all_steps())  # orbax lists only finalised steps
        self._in_flight: int | None = None  # the step of a save not yet known to be complete
        self._failures = 0  # failed saves in a row
        self.newest_complete: int | None = None

    def save(self, state: TrainState, meta: dict) -> bool:
        """Starts an async save of `state` at its step (the loop decides when); whether it
        started. It does not start while the previous save is still writing after
        save_wait_s, or when the previous one failed and this one cannot begin.

        The meta gains a checksum of every saved array, so a restore can tell bit rot from
        a good checkpoint: orbax itself reads a corrupted (not truncated) file silently.
        """
        step = int(jax.device_get(state.step))
        if not self._settle(self._save_wait_s):
            self._failed(
                step, f"the save of step {self._in_flight} was still writing after "
                f"{self._save_wait_s:g} s",
            )  # fmt: skip
            return False
        items = _state_items(state)
        meta = {
            **meta,
            "checksums": {"state": tree_checksums(items), "mems": tree_checksums(state.mems)},
        }
        saves = {"state": ocp.args.StandardSave(items), "meta": ocp.args.JsonSave(meta)}
        if state.mems.size:  # orbax refuses a zero-size array: mem_len 0 saves no memory
            saves["mems"] = ocp.args.StandardSave({"mems": state.mems})
        args = ocp.args.Composite(**saves)
        try:  # the synchronous phase, once, its requests retried within budget_s
            paths.retry(
                lambda: self.manager.save(step, args=args, force=True),
                f"starting the checkpoint save of step {step}",
                policy=dataclasses.replace(self._policy, attempts=1),
                deadline=time.monotonic() + self._policy.budget_s,
            )
        except Exception as e:  # noqa: BLE001 - the synchronous part failed (a storage error)
            self._failed(step, one_line(e))
            return False
        self._in_flight = step
        return True

    def poll(self) -> None:
        """Learns, without waiting, whether the save in flight completed or failed."""
        if self._in_flight is not None and not self.manager.is_saving_in_progress():
            self._settle(0)

    def wait(self) -> None:
        """Waits (at most save_wait_s) until the in-flight save is complete; SavesFailedError
        if it failed or is still writing."""
        if not self._settle(self._save_wait_s, final=True):
            raise SavesFailedError(self._gave_up())

    def close(self) -> None:
        """Waits (at most save_wait_s) for the in-flight save, then releases orbax's threads.

        A save still writing then is given up with SavesFailedError (the CLI exits without
        waiting for orbax's threads), naming the newest complete step.
        """
        if not self._settle(self._save_wait_s, final=True):
            raise SavesFailedError(self._gave_up())
        self.manager.close()

    def writing(self) -> bool:
        """Whether a save may still write to storage (one that close() gave up on too)."""
        return self._in_flight is not None and self.manager.is_saving_in_progress()

    def _settle(self, timeout: float, final: bool = False) -> bool:
        """Waits up to `timeout` s for the save in flight and records how it ended; False
        if it is still writing. A failure is reported by _failed (raised when `final`)."""
        if self._in_flight is None:
            return True
        deadline = time.monotonic() + timeout
        while self.manager.is_saving_in_progress():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        step, self._in_flight = self._in_flight, None
        try:
            self.manager.wait_until_finished()  # raises the failure of the save just ended
        except Exception as e:  # noqa: BLE001 - any failed write, reported in one line
            self._failed(step, one_line(e), final=final)
            return True
        # An async failure orbax did not raise (seen on gs://); process 0 writes the marker.
        if jax.process_index() == 0 and not self._finalised(step):
            self._failed(step, "orbax reported no error, but the step is not finalised", final)
            return True
        self._failures, self.newest_complete = 0, step
        self._complete.add(step)
        if jax.process_index() == 0:  # one line per checkpoint, once it is complete
            log.info("Checkpoint of step %d saved in %s", step, self.directory / str(step))
        return True

    def _finalised(self, step: int) -> bool:
        """Whether `step` is complete on storage (renamed, or commit_success.txt on gs://)."""
        path = self.directory / str(step)
        marker = path / "commit_success.txt" if paths.is_remote(path) else path
        return paths.retry(marker.exists, f"reading {marker}")

    def _failed(self, step: int, reason: str, final: bool = False) -> None:
        """Reports a failed save in one line; raises once too many failed in a row."""
        self._failures += 1
        newest = f"step {self.newest_complete}" if self.newest_complete else "none"
        if final or self._failures >= self._failed_saves:
            raise SavesFailedError(
                f"The checkpoint save of step {step} failed ({reason}); "
                f"{self._failures} save(s) in a row failed. The newest complete checkpoint "
                f"is {newest} in {self.directory}: rerun when storage answers, training "
                "resumes from it."
            )
        log.error(
            "The checkpoint save of step %d failed (%s); training goes on and saves again at "
            "the next interval (newest complete checkpoint: %s).",
            step,
            reason,
            newest,
        )

    def _gave_up(self) -> str:
        newest = f"step {self.newest_complete}" if self.newest_complete else "none"
        return (
            f"The checkpoint save of step {self._in_flight} was still writing after "
            f"{self._save_wait_s:g} s (storage unreachable?); gave it up. The newest "
            f"complete checkpoint is {newest} in {self.directory}: rerun when storage "
            "answers, training resumes from it."
        )

    def steps(self) -> list[int]:
        """The finalised steps, oldest first: those orbax listed (it skips unfinished
        *.orbax-checkpoint-tmp) or that this run saw complete; a failed save is not one."""
        return sorted(step for step in self.manager.all_steps() if step in self._complete)

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
        paths.retry(self._warn_unfinished_writes, f"listing {self.directory}")
        steps = self.steps()
        unreadable, network = [], set()
        for step in reversed(steps):
            state, reason = None, None
            try:
                state = self._restore_step(step, abstract_state, config, corpus_fingerprint)
            except DamagedStep as e:
                reason = str(e)
                if paths.is_remote(self.directory) and _storage_fault(e.__cause__ or e):
                    network.add(step)
            if not _on_every_process(reason is None):  # all processes fall back together
                reason = reason or "unreadable on another process"
                log.info(
                    "Checkpoint step %d cannot be restored (%s); trying an older one.", step, reason
                )
                unreadable.append((step, reason))
                continue
            self.newest_complete = step
            for bad_step, reason in unreadable:
                if move_damaged and bad_step not in network:
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
        paths.retry(self._refuse_to_start_over, f"listing {self.damaged_directory}")
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
            raise DamagedStep(f"meta unreadable: {one_line(e)}") from e
        if not looks_like_meta(meta):
            raise DamagedStep("meta is not an xlnet-jax checkpoint's")
        check_compatible(meta, config, corpus_fingerprint, path)
        same_memory = all(
            meta["config"].get(name) == config[name]
            for name in ("batch_size", "mem_len", "n_layer")
        )
        saved_mems = same_memory and math.prod(abstract_state.mems.shape) > 0  # see save
        items = _state_items(abstract_state)
        args = {"state": ocp.args.StandardRestore(items)}
        if saved_mems:
            args["mems"] = ocp.args.StandardRestore({"mems": abstract_state.mems})
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(**args))
        except Exception as e:  # noqa: BLE001 - truncated or missing array files
            raise DamagedStep(f"arrays unreadable: {one_line(e)}") from e
        checksums = meta.get("checksums", {})
        verify_checksums(restored["state"], checksums.get("state"), "state")
        if not same_memory:
            _warn_memory_restarts(step, meta["config"], config)
        if not saved_mems:  # the loop starts a fresh memory
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
# How tensorstore words a request that failed after its retries (it raises ValueError): a
# status name, or the HTTP code. Whole words only: a file name or path may hold "503".
_STORAGE_WORDS = re.compile(
    r"\b(UNAVAILABLE|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED)\b"
    r"|\bHTTP response code: (408|429|5\d\d)\b"
)


def _storage_fault(error: BaseException) -> bool:
    """Whether a failed read of a remote step was storage failing, not the step's files:
    such a step is never moved aside."""
    return paths.is_transient(error) or bool(_STORAGE_WORDS.search(str(error)))


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
