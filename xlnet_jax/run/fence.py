"""Fencing: once a training run cannot be sure it still holds its workdir lease, nothing it
writes reaches storage.

The lease (lease.py) knows the last moment its holder is sure of it, `safe_until`: the
newest renewal's send time + TTL, less TTL/6. Another run takes the lease over only once
it went unrenewed for a whole TTL, so before that moment nobody else writes the workdir;
after it, somebody may. A `Fence` around a training run's lease enforces the moment on
everything the process writes:

- Every write request gcsfs sends (orbax's metadata and commit marker, the metrics and
  TensorBoard uploads, the run config), from any thread, is refused once the moment has
  passed and cut if it is still in flight or retrying then: each is bounded by the lease
  time that remains. The lease's own requests use a filesystem of their own, not fenced.
- tensorstore writes orbax's arrays from native threads that Python cannot recall. So at
  that moment (a watchdog thread), or as soon as the lease is known lost (another run took
  it over, an error that cannot be retried), the process ends at once: one line, and the
  storage exit code, on which `launch run` pauses and trains again. A save in flight dies
  with it uncommitted: orbax writes its commit marker last, and through gcsfs.
- The loop also checks before each write phase (the run config, the metrics sync, a
  save's start) and ends the run the same way, rather than starting a write it would cut.
- At the end, on every exit path, the fence is lifted and the lease released only once
  nothing of the run can write any more (`release_when_quiet`): a save given up on, or a
  metrics upload still retrying, keeps both up until it ends, or until the lease runs out
  and the fence ends the process.
- The kill switch (`end_process`) reaches os._exit whatever its one line meets: the line
  is written without blocking, and a full, closed or broken stream is passed over.

Why end the run rather than wait and go on if the lease proves still ours (its generation
unchanged when storage answers again): while storage is out, nobody can tell us whether a
taker has come; writes already queued in tensorstore's retries would land whenever storage
answers, possibly over the taker's. Only ending the process removes them all. The rerun
re-reads the lease: on the same host its holder is gone, so it resumes at once; elsewhere
after the TTL; either way from the newest complete checkpoint, bit for bit. The cost is one
restart after an outage of more than 5/6 of the TTL.
"""

import asyncio
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence

from xlnet_jax import paths
from xlnet_jax.errors import STORAGE_EXIT_CODE, LeaseLostError
from xlnet_jax.run.lease import ObjectLease, clock
from xlnet_jax.run.workdir import WorkdirLock

log = logging.getLogger(__name__)

_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_active: "Fence | None" = None  # the fence of this process's run, if it holds a lease


def end_process(message: str) -> None:
    """Says `message` in one line and ends the process with the storage exit code, with
    every thread in it: nothing it queued reaches storage afterwards. The process ends
    whatever the line meets: a pipe nobody reads, a closed one, a full disk."""
    try:
        _write_without_blocking(sys.stdout, "")
        _write_without_blocking(sys.stderr, f"xlnet-jax train: error: {message}\n")
    finally:
        os._exit(STORAGE_EXIT_CODE)


def _write_without_blocking(stream, text: str) -> None:
    """Flushes `stream` and writes `text` to its file, as far as that goes without blocking;
    any error (EAGAIN, EPIPE, ENOSPC, a closed stream) ends the attempt silently."""
    try:
        fd = stream.fileno()
        os.set_blocking(fd, False)
        stream.flush()
        os.write(fd, text.encode(errors="replace"))
    except Exception:  # noqa: BLE001, S110 - the process ends next whatever happened
        pass


class Fence:
    """Bounds this process's writes by its workdir lease; see the module docstring.

    A local workdir's flock cannot be lost: around it (lease None) the fence does nothing.
    """

    def __init__(self, lease: ObjectLease | None, on_lost: Callable[[str], None] = end_process):
        global _active
        self.lease, self._on_lost = lease, on_lost
        self._closed = threading.Event()
        if lease is None:
            return
        _fence_gcsfs_writes()
        _active = self
        self._watchdog = threading.Thread(target=self._watch, daemon=True, name="lease-fence")
        self._watchdog.start()

    @classmethod
    def around(cls, lock: WorkdirLock | ObjectLease) -> "Fence":
        """The fence for the lock prepare_workdir returned."""
        return cls(lock if isinstance(lock, ObjectLease) else None)

    def remaining(self) -> float:
        """Seconds left in which this process may still write; <= 0 once it may not."""
        if self.lease is None:
            return float("inf")
        if self.lease.lost():  # sticky: once lost, never valid again
            return -1.0
        return max(self.lease.safe_until - clock(), 1e-3)

    def check(self) -> None:
        """Before a write phase: ends the run (on_lost) if the lease can no longer be
        counted on. LeaseLostError where on_lost returns (tests)."""
        if self.remaining() <= 0:
            error = self._error()
            self._on_lost(str(error))
            raise error

    def close(self) -> None:
        """Stops fencing (after the run's last write, before the lease is released)."""
        global _active
        self._closed.set()
        if _active is self:
            _active = None

    def release_when_quiet(
        self, lock: WorkdirLock | ObjectLease, writing: Sequence[Callable[[], bool]]
    ) -> None:
        """Lifts the fence and releases `lock` once none of `writing` says it still writes.

        If one still does (a save given up on, an upload still retrying), both stay up and a
        thread releases them once it stops. The fence keeps cutting its writes at the
        lease's end meanwhile; a process that exits first leaves the lease to expire (or to
        be taken at once by a rerun in its container).
        """

        def quiet() -> bool:
            return not any(still() for still in writing)

        def release() -> None:
            self.close()
            lock.release()

        if quiet():
            release()
            return
        log.warning(
            "A write of this run is still in flight; the workdir stays locked and fenced "
            "until it ends."
        )

        def wait_then_release() -> None:
            while not quiet():
                self._closed.wait(0.1)
            release()

        threading.Thread(target=wait_then_release, daemon=True, name="release-when-quiet").start()

    def _error(self) -> LeaseLostError:
        try:
            self.lease.check()
        except LeaseLostError as e:
            return e
        raise AssertionError("the fence fired while the lease is valid")

    def _watch(self) -> None:
        while not self._closed.wait(min(max(self.remaining(), 0.0), 0.5)):
            if self.remaining() <= 0 and not self._closed.is_set():
                self._on_lost(str(self._error()))
                return


def _fence_gcsfs_writes() -> None:
    """Bounds every write request gcsfs sends by the active fence (idempotent); the retries
    of xlnet_jax.paths run inside the bound."""
    paths.use_storage()
    from xlnet_jax.paths import gcsfs_adapter  # gcsfs only where a gs:// workdir is leased

    gcsfs_adapter.wrap_request("fence", _fenced)


def _fenced(request: Callable) -> Callable:
    """`request` (gcsfs's request method) refused or cut at the active fence's moment."""

    @functools.wraps(request)
    async def fenced(self, method, *args, **kwargs):
        fence = _active
        if fence is None or method.upper() not in _MUTATING or self is fence.lease.filesystem:
            return await request(self, method, *args, **kwargs)
        remaining = fence.remaining()
        if remaining <= 0:
            raise fence._error()
        try:
            return await asyncio.wait_for(request(self, method, *args, **kwargs), remaining)
        except TimeoutError:
            if fence.remaining() <= 0:
                raise fence._error() from None
            raise

    return fenced
