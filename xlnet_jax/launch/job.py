"""`xlnet-jax launch run`: a training job that survives preemptions, with bounded retries.

The loop: create the slice unless it is up, set it up, start training, then watch it
every `poll` seconds. A slice that gcloud reports lost (PREEMPTED, TERMINATED, ...; for a
queued resource SUSPENDED, FAILED, ...) is deleted and recreated, set up again and
trained again: training resumes from the workdir's newest checkpoint, so the workdir
must be on gs://. After `max_restarts` recreations it gives up with a message naming
the state it last saw. A trainer that failed on a healthy slice in a way `restarts.cause`
names (storage kept failing, the job lost a process, a trainer killed by a signal; read
from worker 0's exit code) is stopped on every worker and started again after
`restarts.pause_s`, on the same slice, counted among the restarts. Any other exit code of
the trainer ends the job with that code.
"""

import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from xlnet_jax.launch import commands, remote, restarts, shell

_UP = {"READY", "ACTIVE"}
_STARTING = {
    "CREATING", "STARTING", "RESTARTING", "PROVISIONING", "ACCEPTED", "WAITING_FOR_RESOURCES"
}  # fmt: skip
# Anything else (PREEMPTED, TERMINATED, STOPPED, SUSPENDED, FAILED, ...) counts as lost.

Gcloud = Callable[[Sequence[str]], tuple[int, str]]


def _gcloud(argv: Sequence[str]) -> tuple[int, str]:
    """Runs argv, echoing it on stderr like runner.run_commands; (exit code, stdout)."""
    print(f"+ {shell.command(argv)}", file=sys.stderr, flush=True)
    result = subprocess.run(argv, check=False, capture_output=True, text=True)
    sys.stderr.write(result.stderr)
    return result.returncode, result.stdout


def run_job(
    where: tuple[str, str, str | None],
    queued: bool,
    create: Sequence[str],
    setup: Sequence[Sequence[str]],
    train: Sequence[str],
    stop: Sequence[str],
    *,
    max_restarts: int,
    poll: float,
    restart_pause: float | None = None,
    gcloud: Gcloud = _gcloud,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Runs the job to its end; the trainer's exit code, or 1 after too many restarts.

    `stop` stops the trainer on every worker (before a failed trainer's restart);
    `restart_pause` replaces the policy's pause (restarts.pause_s) when given."""
    restarted, state, set_up = 0, _state(where, queued, gcloud), False
    while True:
        if state is not None and state not in _UP | _STARTING:
            _say(f"the slice is {state}: deleting it to recreate it")
            if gcloud(commands.delete(*where, queued, yes=True))[0] != 0:
                return _fail("could not delete the lost slice; see gcloud's message above")
            state, set_up = None, False
        if state is None and gcloud(create)[0] != 0:
            return _fail("could not create the slice; see gcloud's message above")
        state = _wait_until_up(where, queued, gcloud, sleep, poll)
        if state in _UP:
            for argv in [train] if set_up else [*setup, train]:
                if gcloud(argv)[0] != 0:
                    return _fail(f"`{subprocess.list2cmdline(argv)}` failed")
            set_up = True
            state, code = _watch(where, queued, gcloud, sleep, poll)
            if code is not None and restarts.cause(code) and restarted < max_restarts:
                restarted += 1
                pause = restarts.pause_s(code) if restart_pause is None else restart_pause
                _say(restarts.announce("worker", code, pause, restarted, max_restarts))
                gcloud(stop)  # a worker still waiting on the one that stopped
                sleep(pause)
                continue
            if code is not None:
                _say(f"training ended with exit code {code}")
                return code
        if restarted == max_restarts:
            return _fail(
                f"the slice was lost ({state}) {restarted + 1} time(s); gave up after "
                f"--max-restarts={max_restarts}. Rerun `launch run` to continue from the "
                "newest checkpoint."
            )
        restarted += 1
        _say(f"the slice was lost ({state}); restart {restarted} of {max_restarts}")


def _state(where, queued: bool, gcloud: Gcloud) -> str | None:
    """gcloud's state word for the slice, or None if it does not exist."""
    code, out = gcloud(commands.describe(*where, queued, state_only=True))
    return (out.strip() or None) if code == 0 else None


def _wait_until_up(where, queued, gcloud, sleep, poll) -> str | None:
    state = _state(where, queued, gcloud)
    while state in _STARTING:
        sleep(poll)
        state = _state(where, queued, gcloud)
    return state


def _watch(where, queued, gcloud, sleep, poll) -> tuple[str | None, int | None]:
    """Polls until the trainer exits (state, its code) or the slice is lost (state, None)."""
    while True:
        sleep(poll)
        state = _state(where, queued, gcloud)
        if state not in _UP:
            return state, None
        code, out = gcloud(commands.ssh(*where, "0", remote.outcome(), queued))
        words = out.split()
        if code == 0 and len(words) == 2 and words[0] == "exit":
            return state, int(words[1])
        if code == 0 and words == ["absent"]:  # the VM restarted under the trainer
            return "TRAINER_GONE", None


def _say(message: str) -> None:
    print(f"launch run: {message}", file=sys.stderr, flush=True)


def _fail(message: str) -> int:
    print(f"launch run: error: {message}", file=sys.stderr, flush=True)
    return 1
