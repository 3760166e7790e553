"""Save and stop at a step boundary on SIGTERM or Ctrl-C, for pretraining and fine-tuning.

After the save, Ctrl-C raises SavedAndInterrupted (the CLI exits 130) and a SIGTERM before
the last step raises StoppedBeforeEnd (the CLI exits STOPPED_EXIT_CODE, 6): a run that
stopped short is never taken for a finished one. Rerunning the same command resumes.
"""

import os
import signal
import sys
from collections.abc import Callable

import jax
from jax.experimental import multihost_utils

from xlnet_jax.errors import STOPPED_EXIT_CODE


class SavedAndInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped training after it saved; the line saying how to continue is printed.

    A KeyboardInterrupt, so a Python caller still sees the interrupt it asked for.
    """


class StoppedBeforeEnd(Exception):
    """A signal stopped training after it saved, before num_train_steps: the CLI exits
    STOPPED_EXIT_CODE, on which `launch run` trains again from that save."""


class Preemption:
    """Whether to save and stop at this step boundary, after a SIGTERM or a Ctrl-C.

    One process: Python handlers for SIGTERM and SIGINT set a flag; a second SIGINT exits
    at once (status 130) with one line, for a user who does not want to wait for the save.
    Several processes: JAX's preemption service (started by jax.distributed) catches
    SIGTERM on any host and agrees on one step at which every host saves, so no collective
    save is left half-entered; SIGINT keeps its default there.
    """

    def __init__(self):
        self.signal_name = None
        self._multi_host = jax.process_count() > 1
        self._previous = {}
        if not self._multi_host:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, frame):
        del frame
        if signum == signal.SIGINT and self.signal_name == "Ctrl-C":
            sys.stderr.write("\nSecond Ctrl-C: aborted without saving this step.\n")
            sys.stderr.flush()
            os._exit(130)  # the shell's status for Ctrl-C: 128 + SIGINT
        if signum == signal.SIGINT:
            self.signal_name = "Ctrl-C"
            sys.stderr.write(
                "\nCtrl-C: saving at the end of this step, then stopping (Ctrl-C again "
                "aborts without saving).\n"
            )
            sys.stderr.flush()
        else:
            self.signal_name = self.signal_name or "SIGTERM"

    def request(self, reason: str) -> None:
        """Asks this process's loops to save and stop at their next step boundary, as a
        SIGTERM does, for `reason` (named in the line each prints); one process only (several
        agree on their step through JAX's preemption service, which no call reaches)."""
        self.signal_name = self.signal_name or reason

    def requested(self, step: int) -> bool:
        """Whether to save and stop after `step` (counted from this run's start)."""
        if self._multi_host:
            if multihost_utils.reached_preemption_sync_point(step):
                self.signal_name = "SIGTERM"
                return True
            return False
        return self.signal_name is not None

    def stop(self, done: int, num_train_steps: int, note: Callable[[str], None]) -> None:
        """Once step `done` is saved: says how to continue, then raises SavedAndInterrupted
        (Ctrl-C) or StoppedBeforeEnd (before num_train_steps); returns at the last step."""
        note(
            f"{self.signal_name}: saved step {done} and stopped; rerun the same command to "
            "continue."
        )
        if self.signal_name == "Ctrl-C":
            raise SavedAndInterrupted
        if done < num_train_steps:
            raise StoppedBeforeEnd(f"stopped at step {done} (exit code {STOPPED_EXIT_CODE})")

    def restore(self) -> None:
        """Puts back the signal handlers that were there before."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
