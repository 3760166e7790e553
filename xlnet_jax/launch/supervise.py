"""A thin parent for one process of a multi-process job: a lost peer becomes one line and exit 5.

When a peer of a jax.distributed job dies (SIGKILL, OOM, a dead host), is hung (SIGSTOP)
or the coordinator goes away, jax 0.10.2's coordination service notices within its
heartbeat timeout and aborts every survivor from a C++ thread: SIGABRT after a Gloo
traceback, glog errors and a fatal-check stack, about 60 lines of internals. The client's
`missed_heartbeat_callback` cannot replace that from Python: jaxlib 0.10.2 has no
converter for its status argument, so a Python callback ends in `std::bad_cast` and the
same abort (tried; see docs/rehearse-pod.md).

So `xlnet-jax train` (and `eval`) with --coordinator_address or --distributed runs its
own command again as a child under this parent. The child's stdout is passed through
untouched; its stderr line by line, except that a block that starts like a traceback or a
glog error is held back. If the child then ends because the job lost a process, the held
block goes to a file and the parent's last word is one line naming the lost process, with
exit code PEER_LOST_EXIT_CODE. Any other ending passes the held lines on and returns the
child's own exit code (128+N for signal N, as shells say). SIGTERM and SIGINT reach the
child; the child dies with the parent (PR_SET_PDEATHSIG).

Bound: the survivors' abort comes within the heartbeat timeout of the loss (measured
0.1-9 s with 10 s); once the child's output shows the loss, it gets KILL_GRACE_S more to
end before it is killed.
"""

import ctypes
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

PEER_LOST_EXIT_CODE = 5  # the job lost a process; `launch run` restarts it
SUPERVISED_ENV = "XLNET_JAX_SUPERVISED"  # set in the child: it runs the command itself
KILL_GRACE_S = 15.0
# A held block that the child outlives by this long was not its end: it is passed on
# (at once when a log record or progress line follows it).
RELEASE_AFTER_S = 30.0

# Lines that may open a survivor's last words: a traceback, a glog line of jax's distributed
# runtime, a fatal check, an uncaught C++ exception.
_BLOCK_START = re.compile(
    r"^(Traceback \(most recent call last\)"
    r"|[WEF]\d{4} [\d:.]+\s+\d+ (coordination_service\w*|preemption_sync_manager|client)\.(cc|h):"
    r"|\*\*\* Check failure|terminate called)"
)
# A line of the run going on (a log record, a progress line): a held block was not its end.
_GOING_ON = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ |step \d+/)")
# The job lost a process (as opposed to this process failing by itself).
_LOSS = re.compile(
    r"Gloo .* failed|detected fatal errors|stopped sending heartbeats|heartbeat timeout"
    r"|Polled an error from coordination service"
)
_TASK_TIMEOUT = re.compile(r"Task (\d+) heartbeat timeout")
_UNHEALTHY = re.compile(r"stopped sending heartbeats\):\s*\n\s*([\d, ]+)")
# The coordination service itself is unreachable (gRPC UNAVAILABLE): process 0 is gone.
_COORDINATOR_GONE = re.compile(
    r"grpc_status:14|Socket closed|failed to connect to all addresses|Connection refused"
)


def needed(flag_values) -> bool:
    """Whether this command joins a multi-process job and is not yet the supervised child."""
    joins = "coordinator_address" in flag_values and bool(
        flag_values.coordinator_address or flag_values.distributed
    )
    return joins and not os.environ.get(SUPERVISED_ENV)


def lost_process(text: str) -> str:
    """Which process the job lost, from jax's messages: 'process N', or a generic phrase."""
    found = sorted({int(n) for n in _TASK_TIMEOUT.findall(text)})
    for group in _UNHEALTHY.findall(text):
        found = sorted(set(found) | {int(n) for n in re.findall(r"\d+", group)})
    if found:
        return "process " + ", ".join(map(str, found))
    if _COORDINATOR_GONE.search(text):
        return "process 0 (the coordinator)"
    return "a peer process"


def run(argv: Sequence[str], name: str, process_id: int | None = None) -> int:
    """Runs argv as the supervised child; returns its exit code or PEER_LOST_EXIT_CODE."""
    child = subprocess.Popen(
        list(argv),
        stderr=subprocess.PIPE,
        env={**os.environ, SUPERVISED_ENV: "1"},
        preexec_fn=functools.partial(signal_on_parent_death, signal.SIGKILL),
    )
    forwarded = {sig: signal.signal(sig, lambda s, _f: child.send_signal(s)) for sig in (
        signal.SIGTERM, signal.SIGINT
    )}  # fmt: skip
    reader = _Reader(child)
    reader.start()
    try:
        code = _wait(child, reader)
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
    reader.join()
    held = "".join(reader.held)
    if code != 0 and _LOSS.search(held):
        who = lost_process(held)
        with tempfile.NamedTemporaryFile(
            "w", prefix="xlnet-jax-lost-peer-", suffix=".log", delete=False
        ) as f:
            f.write(held)
        me = "" if process_id is None else f" (process {process_id})"
        print(
            f"xlnet-jax {name}: error: the job lost {who}: it died, hung or its host went "
            f"away; this process{me} stops too (exit code {PEER_LOST_EXIT_CODE}). Start the "
            f"job again to resume from its newest checkpoint (`launch run` does). jax's "
            f"messages: {f.name}",
            file=sys.stderr,
            flush=True,
        )
        return PEER_LOST_EXIT_CODE
    sys.stderr.write(held)
    sys.stderr.flush()
    return code if code >= 0 else 128 - code


def _wait(child: subprocess.Popen, reader: "_Reader") -> int:
    """The child's exit code; it is killed KILL_GRACE_S after its output shows a loss."""
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if reader.loss_seen is not None and time.monotonic() > reader.loss_seen + KILL_GRACE_S:
            child.kill()


class _Reader(threading.Thread):
    """Copies the child's stderr to ours, holding back blocks that may be its last words."""

    def __init__(self, child: subprocess.Popen):
        super().__init__(daemon=True)
        self.child = child
        self.held: list[str] = []
        self.held_since: float | None = None
        self.loss_seen: float | None = None

    def run(self) -> None:
        for raw in self.child.stderr:
            line = raw.decode(errors="replace")
            now = time.monotonic()
            went_on = _GOING_ON.match(line) or now - (self.held_since or now) > RELEASE_AFTER_S
            if self.held and self.loss_seen is None and went_on:
                sys.stderr.write("".join(self.held))  # the child went on: not its end
                self.held, self.held_since = [], None
            if not self.held and not _BLOCK_START.match(line):
                sys.stderr.write(line)
                sys.stderr.flush()
                continue
            self.held.append(line)
            self.held_since = self.held_since or now
            if self.loss_seen is None and _LOSS.search(line):
                self.loss_seen = now


def signal_on_parent_death(signum: int) -> None:
    """In a child, before exec: the signal it gets when its parent dies (Linux; elsewhere a
    no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
