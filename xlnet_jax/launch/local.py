"""The local backend: N train processes on localhost, one log file each, watched together.

A multi-process JAX job is all-or-nothing: when one process dies the others block in
their next collective. So the first non-zero exit ends the job: the others are
terminated, and the exit code and the dead process's log are reported; of processes that
fail together, one whose code a restart would repeat (1, 2: `restarts.cause` names none)
is the one reported, as `launch run` does on a pod. A process whose training loop made no
progress (its heartbeat file, run/heartbeat.py) for `hang_s` seconds is hung: the job ends
with PEER_LOST_EXIT_CODE. A timeout bounds the whole job. Process 0's log is echoed to
stdout as it grows. Ctrl-C stops the job cleanly: every process saves and releases its
lease (`run`). `run_with_restarts` starts such a job again under the restart policy of
`launch run` (restarts.py).
"""

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from xlnet_jax.launch import restarts
from xlnet_jax.launch.supervise import PEER_LOST_EXIT_CODE, signal_on_parent_death
from xlnet_jax.run.heartbeat import HEARTBEAT_ENV

DEFAULT_PROGRAM = (sys.executable, "-m", "xlnet_jax.cli")
POLL_SECONDS = 0.1
STOP_GRACE_SECONDS = 300.0  # After Ctrl-C: how long the processes have to save and stop.
TAIL_LINES = 20  # Lines of a failed process's log repeated in the error message.
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception)\b.*:")  # "ValueError: ..."


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for the JAX coordinator."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_paths(log_dir: Path, num_processes: int) -> list[Path]:
    """Where process i writes its stdout and stderr: LOG_DIR/process_{i}.log."""
    return [log_dir / f"process_{i}.log" for i in range(num_processes)]


def run(
    commands: Sequence[Sequence[str]],
    log_dir: Path,
    timeout: float | None,
    grace_seconds: float = 10.0,
    hang_s: float | None = None,
) -> int:
    """Runs `commands` at once, process i logging to `log_paths(log_dir, n)[i]` (appended,
    after a header line for this start).

    Returns 0 when all exit 0; else the first failure's exit code (128+N if it was killed
    by signal N, as shells say), PEER_LOST_EXIT_CODE for a process hung `hang_s` seconds,
    124 on timeout, 130 on Ctrl-C. Processes still running at the end are sent SIGTERM,
    then SIGKILL after `grace_seconds` (JAX treats SIGTERM as a preemption notice).

    The processes run in sessions of their own, so a terminal's Ctrl-C reaches the launcher
    alone: it sends each process SIGTERM, the preemption notice on which every process saves
    at one agreed step and releases the workdir's lease, and waits up to STOP_GRACE_SECONDS
    for that (a second Ctrl-C kills them without saving). A process outlives no launcher:
    the launcher's death sends it SIGTERM.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = log_paths(log_dir, len(commands))
    logs[0].touch()
    # Logs stay current, also on a crash. The processes simulate CPU devices: keep JAX off
    # an accelerator (N processes would contend for it) unless the caller chose a platform.
    env = {"JAX_PLATFORMS": "cpu", **os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []
    # Each start's lines follow its own header in the logs, which keep the earlier starts'
    # (a restart's log shows why it restarted); what the launcher quotes is from this start.
    starts = {log: _start(log) for log in logs}
    try:
        with open(logs[0], "rb") as echo:
            echo.seek(starts[logs[0]])
            beats = [log.with_suffix(".heartbeat") for log in logs]
            for i, (argv, log) in enumerate(zip(commands, logs, strict=True)):
                beats[i].touch()
                with open(log, "ab") as out:
                    proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=out,
                        env={**env, HEARTBEAT_ENV: str(beats[i])},
                        start_new_session=True,
                        preexec_fn=functools.partial(signal_on_parent_death, signal.SIGTERM),
                    )
                procs.append(proc)
                print(f"process {i}: pid {proc.pid}, log {log}", file=sys.stderr, flush=True)
            try:
                return _wait(procs, logs, echo, timeout, beats, hang_s, starts)
            except KeyboardInterrupt:
                _stop(procs, echo)
                return 130
    finally:
        _terminate(procs, grace_seconds)


def _stop(procs: Sequence[subprocess.Popen], echo: BinaryIO) -> None:
    """After Ctrl-C: SIGTERM to every process, then waits for their saves while relaying
    process 0's log (its save, its last eval); SIGKILL after STOP_GRACE_SECONDS or at a
    second Ctrl-C."""
    print(
        f"interrupted: every process saves at its next step and stops (up to "
        f"{STOP_GRACE_SECONDS:g} s; Ctrl-C again kills them without saving)",
        file=sys.stderr,
        flush=True,
    )
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    try:
        while any(p.poll() is None for p in running) and time.monotonic() < deadline:
            _echo(echo)
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        print("second Ctrl-C: killing the processes without saving", file=sys.stderr)
    for p in running:
        if p.poll() is None:
            p.kill()
            p.wait()
    _echo(echo)


def _start(log: Path) -> int:
    """Appends this start's header line to `log`; the offset where this start's lines
    begin (the header's end)."""
    with open(log, "ab") as out:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        out.write(f"==== xlnet-jax launch: a new start at {stamp} ====\n".encode())
        return out.tell()


def run_with_restarts(
    make_commands: Callable[[], Sequence[Sequence[str]]],
    log_dir: Path,
    timeout: float | None,
    max_restarts: int,
    restart_pause: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    hang_s: float | None = None,
) -> int:
    """`run`s the job, and again after each failure that restarts.cause names, at most
    `max_restarts` times; the last run's exit code.

    `make_commands` gives each attempt's commands (a fresh coordinator port each time);
    `timeout` bounds each attempt, `hang_s` each process's time without a step;
    `restart_pause` replaces the policy's pause if given.
    """
    restarted = 0
    while True:
        code = run(make_commands(), log_dir, timeout, hang_s=hang_s)
        if restarts.cause(code) is None or restarted == max_restarts:
            if code != 0 and max_restarts:
                print(
                    f"launch run: the job ended with exit code {code} after {restarted} "
                    f"restart(s) (--max-restarts={max_restarts})",
                    file=sys.stderr,
                    flush=True,
                )
            return code
        restarted += 1
        pause = restarts.pause_s(code) if restart_pause is None else restart_pause
        line = restarts.announce("process", code, pause, restarted, max_restarts)
        print(f"launch run: {line}", file=sys.stderr, flush=True)
        sleep(pause)


def _wait(
    procs: Sequence[subprocess.Popen],
    logs: Sequence[Path],
    echo: BinaryIO,
    timeout: float | None,
    beats: Sequence[Path],
    hang_s: float | None,
    starts: dict[Path, int],
) -> int:
    """Polls until all exit 0, one fails or hangs, or `timeout` passes; echoes log 0
    meanwhile."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        codes = [None if (c := p.poll()) is None else c if c >= 0 else 128 - c for p in procs]
        _echo(echo)  # After the poll: all that an exited process wrote is shown first.
        failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            final = [i for i in failed if restarts.cause(codes[i]) is None]
            i = (final or failed)[0]
            message = f"process {i} exited with code {codes[i]}; its log: {logs[i]}"
            _report(message, logs[i], starts[logs[i]])
            return codes[i]
        if hang_s is not None:
            for i, (code, beat) in enumerate(zip(codes, beats, strict=True)):
                age = time.time() - beat.stat().st_mtime
                if code is None and age > hang_s:
                    _report(
                        f"process {i} made no training progress for {age:.0f} s "
                        f"(--hang-timeout={hang_s:g}): hung; its log: {logs[i]}",
                        logs[i],
                        starts[logs[i]],
                    )
                    return PEER_LOST_EXIT_CODE
        if all(code == 0 for code in codes):
            print(f"all {len(procs)} processes finished; logs in {logs[0].parent}", file=sys.stderr)
            return 0
        if deadline is not None and time.monotonic() > deadline:
            running = [i for i, code in enumerate(codes) if code is None]
            print(
                f"error: timed out after {timeout:g} s; processes {running} still running; "
                f"logs in {logs[0].parent}",
                file=sys.stderr,
            )
            return 124
        time.sleep(POLL_SECONDS)


def _echo(echo: BinaryIO) -> None:
    """Copies what was appended to log 0 since the last call to stdout."""
    chunk = echo.read()
    if chunk:
        sys.stdout.write(chunk.decode(errors="replace"))
        sys.stdout.flush()


def _report(message: str, log: Path, start: int = 0) -> None:
    """Prints `message` to stderr, then the first exception line and the last lines of what
    this start wrote to the log (from offset `start`: never an earlier start's error).

    The first exception is usually the cause; later ones are often teardown noise that
    fills the tail (e.g. orbax threads failing at interpreter shutdown).
    """
    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    tail = lines[-TAIL_LINES:]
    print(f"error: {message}", file=sys.stderr)
    first_error = next((line for line in lines if _EXCEPTION_LINE.match(line)), None)
    if first_error is not None and first_error not in tail:
        print(f"  first exception in the log: {first_error}\n  last lines:", file=sys.stderr)
    for line in tail:
        print(f"  | {line}", file=sys.stderr)


def _terminate(procs: Sequence[subprocess.Popen], grace_seconds: float) -> None:
    """SIGTERM to every running process; SIGKILL to those alive after `grace_seconds`."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + grace_seconds
    for p in running:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
