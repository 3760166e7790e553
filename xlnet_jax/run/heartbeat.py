"""The training loop's heartbeat: a file whose modification time says the loop still makes
progress, for `launch run`'s hang bound.

`launch` starts each trainer with $XLNET_JAX_HEARTBEAT naming a file of its own. The loop
touches it after every step, evaluation and save (at most once a second), so a process
stopped (SIGSTOP), wedged in a collective or on a stuck chip stops touching it even while
its other threads (JAX's own heartbeats, the lease's renewals) go on. The launcher counts a
process whose file is older than its hang bound as hung.
"""

import os
import time

HEARTBEAT_ENV = "XLNET_JAX_HEARTBEAT"


class Heartbeat:
    """Touches $XLNET_JAX_HEARTBEAT's file; does nothing when it is unset."""

    def __init__(self) -> None:
        self._path = os.environ.get(HEARTBEAT_ENV) or None
        self._last = -float("inf")

    def beat(self) -> None:
        """Marks progress now (at most once a second; a file it cannot write is skipped)."""
        now = time.monotonic()
        if self._path is None or now - self._last < 1.0:
            return
        self._last = now
        try:
            with open(self._path, "a"):
                os.utime(self._path)
        except OSError:
            pass
