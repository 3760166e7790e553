"""The run's workdir (an exclusive lock, free space for the next checkpoint) and its corpus.

Checked before training starts, so an unusable workdir or a corpus that does not match the
config stops the run in one line, before anything compiles.
"""

import difflib
import fcntl
import os
import shutil

import jax
import numpy as np
from jax.experimental import multihost_utils

from xlnet_jax import paths
from xlnet_jax.errors import WorkdirError
from xlnet_jax.run.lease import ObjectLease

# Free space kept in reserve beyond one checkpoint (metrics, TensorBoard, orbax metadata).
MIN_FREE_BYTES = 64 * 2**20


class WorkdirLock:
    """An exclusive lock per process on the workdir, released on exit or crash."""

    def __init__(self, path: str):
        self._file = open(path, "a+")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise WorkdirError(
                f"Another run is training in this workdir (lock {path} is held). Wait for it "
                "to finish or stop it, or use a different --workdir."
            ) from None

    def check(self) -> None:
        """A local lock cannot be lost while its file is open."""

    def release(self) -> None:
        """Unlocks; the kernel also drops the lock if the process dies."""
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()


def check_free_space(workdir: str, needed: int, before: str) -> None:
    """Raises WorkdirError if workdir's disk has less than `needed` bytes free.

    Checked before training and before every save, so a full disk stops the run with the
    newest checkpoint intact instead of failing inside an asynchronous write. Every process
    takes the same decision (the least free space of all), so none is left waiting. Object
    storage (gs://) has no disk to fill: nothing is checked there.
    """
    if paths.is_remote(workdir):
        return
    free = _min_over_processes(shutil.disk_usage(workdir).free)
    if free < needed:
        raise WorkdirError(
            f"Workdir {workdir} has {free / 2**20:.0f} MiB free but needs "
            f"{needed / 2**20:.0f} MiB before {before}. Free some space or pick another "
            "--workdir, then rerun: training resumes from the newest checkpoint."
        )


def _min_over_processes(value: int) -> int:
    """The smallest `value` over all processes, so every process takes the same decision."""
    if jax.process_count() == 1:
        return value
    # MiB as float32: process_allgather would truncate byte counts to int32.
    mib = multihost_utils.process_allgather(np.float32(value / 2**20))
    return int(float(np.min(mib)) * 2**20)


def prepare_workdir(workdir: str, checkpoint_bytes: int) -> WorkdirLock | ObjectLease:
    """Creates the workdir, checks it is writable with room for a checkpoint, and locks it.

    A local workdir gets a flock per process; a gs:// one a lease object per process
    (lease.py), since object storage has no locks.
    """
    root = paths.as_path(workdir)
    if paths.retry(lambda: root.exists() and not root.is_dir(), f"checking {root}"):
        raise WorkdirError(f"Workdir {root} is a file, not a directory; pick another --workdir.")
    probe = root / f".write-test-{jax.process_index()}-{os.getpid()}"

    def write_probe() -> None:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink(missing_ok=True)  # a retry after a lost reply finds it gone

    try:
        paths.retry(write_probe, f"probing that {root} is writable")
    except OSError as e:  # 403 and other answers; transient faults are retried above
        raise WorkdirError(
            f"Workdir {root} is not writable ({e.strerror or e}); pick another --workdir."
        ) from None
    check_free_space(str(root), checkpoint_bytes + MIN_FREE_BYTES, "training starts")
    lock = root / f".lock-process-{jax.process_index()}"
    return ObjectLease(str(lock)) if paths.is_remote(workdir) else WorkdirLock(str(lock))


def require_existing(workdir: str) -> None:
    """Raises WorkdirError naming `workdir` when it does not exist, with the directories
    beside it whose names are close (a typo), for commands that read a run (eval)."""
    root = paths.as_path(workdir)
    if paths.retry(root.is_dir, f"checking {root}"):
        return
    parent = root.parent
    if not paths.retry(parent.is_dir, f"checking {parent}"):
        raise WorkdirError(f"Workdir {workdir} does not exist (nor does {parent}).")
    names = [p.name for p in paths.retry(lambda: list(parent.iterdir()), f"listing {parent}")]
    runs = sorted(n for n in names if not n.startswith(".") and (parent / n).is_dir())
    close = difflib.get_close_matches(root.name, runs, n=3, cutoff=0.5)
    nearby = close or runs[:5]
    beside = f"; {parent} holds {', '.join(nearby)}" if nearby else f"; {parent} is empty"
    raise WorkdirError(f"Workdir {workdir} does not exist{beside}.")
