"""The restart policy of `launch run`, one for both backends: which trainer exits start the job
again, after what pause.

A job that ends in one of these is started again on every process, resuming from the
newest checkpoint, up to --max-restarts times, each restart counted and announced:

- STORAGE_EXIT_CODE (4): object storage kept failing beyond the trainer's retry budget;
- PEER_LOST_EXIT_CODE (5): the job lost a process (killed, hung, its host gone; see
  supervise), or `launch run` found a process hung (no training step for its hang bound);
- STOPPED_EXIT_CODE (6): a trainer was stopped by a signal before its last step, after it
  saved (a preemption notice, a maintenance event);
- 128+N, a trainer killed by signal N (SIGKILL from the OOM killer, SIGABRT from a crash,
  SIGTERM before the loop could save), except SIGINT.

Anything else is final: 0 is done (the last step reached), 1 and 2 are the trainer's own
errors (config, corpus, non-finite loss), which a restart would only repeat; 130 is an
interruption (Ctrl-C). A stop the user asked for (`launch stop`) is final whatever the
code: `launch run` reads it from the worker, not from the code.
"""

import signal

from xlnet_jax.errors import STOPPED_EXIT_CODE, STORAGE_EXIT_CODE
from xlnet_jax.launch.supervise import PEER_LOST_EXIT_CODE

# The trainer already retried storage for its budget; give an outage this long to end.
STORAGE_PAUSE_S = 120.0
# A lost process: time for the survivors to exit and the coordinator's port to be freed.
LOST_PROCESS_PAUSE_S = 30.0
_STOP_REQUESTS = {128 + signal.SIGINT}


def cause(code: int) -> str | None:
    """Why a job that ended with exit code `code` is started again; None if it is not."""
    if code == STORAGE_EXIT_CODE:
        return "object storage kept failing"
    if code == PEER_LOST_EXIT_CODE:
        return "the job lost a process"
    if code == STOPPED_EXIT_CODE:
        return "a trainer was stopped before its last step (a preemption notice?)"
    if code > 128 and code not in _STOP_REQUESTS:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"a trainer was killed ({name})"
    return None


def pause_s(code: int) -> float:
    """Seconds to wait before starting again after exit code `code` (see `cause`)."""
    return STORAGE_PAUSE_S if code == STORAGE_EXIT_CODE else LOST_PROCESS_PAUSE_S


def announce(where: str, code: int, pause: float, restart: int, max_restarts: int) -> str:
    """The line (without its prefix) printed before restart number `restart`."""
    return (
        f"{cause(code)} (exit code {code}); training again in {pause:g} s on every "
        f"{where}, from the newest checkpoint (restart {restart} of {max_restarts})"
    )
