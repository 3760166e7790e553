"""`xlnet-jax launch run`: a training job that survives preemptions, with bounded retries.

The loop: create the slice unless it is up, set it up, start training, then watch it
every `poll` seconds. A slice that gcloud reports lost (PREEMPTED, TERMINATED, ...; for a
queued resource SUSPENDED, FAILED, ...) is deleted and recreated, set up again and
trained again: training resumes from the workdir's newest checkpoint, so the workdir
must be on gs://. After `max_restarts` recreations it gives up with a message naming
the state it last saw.

Each poll reads every worker's outcome (remote.outcome), and the job ends or restarts on
the first verdict, in this order of precedence:
- a worker that failed in a way a restart would repeat (exit code 1, 2, anything
  `restarts.cause` does not name) ends the job with that worker's name and code;
- a worker that `launch stop` stopped ends the job: the user asked;
- a worker that ended in a way `restarts.cause` names (4: storage kept failing, 5: the job
  lost a process, 6: stopped by a signal before its last step, 128+N: killed by a signal)
  restarts the job: stopped on every worker and started again after `restarts.pause_s`,
  on the same slice, counted among the restarts;
- a worker whose training loop has not made progress (its heartbeat file) for `hang_s`
  seconds is hung: the same restart, as a lost process (exit code 5);
- every worker at exit 0 (the last step reached) is success.
"""

import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from xlnet_jax.errors import STOPPED_EXIT_CODE
from xlnet_jax.launch import commands, remote, restarts, shell
from xlnet_jax.launch.supervise import PEER_LOST_EXIT_CODE

_UP = {"READY", "ACTIVE"}
_STARTING = {
    "CREATING", "STARTING", "RESTARTING", "PROVISIONING", "ACCEPTED", "WAITING_FOR_RESOURCES"
}  # fmt: skip
# Anything else (PREEMPTED, TERMINATED, STOPPED, SUSPENDED, FAILED, ...) counts as lost.
# A worker whose training loop made no step, evaluation or save this long is hung. It also
# bounds the time from a start to the first step (restore, compile), so it is generous.
HANG_S = 1800

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
    hang_s: float = HANG_S,
    restart_pause: float | None = None,
    gcloud: Gcloud = _gcloud,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Runs the job to its end; 0 once every worker reached the last step, a failed
    worker's exit code, or 1 after too many restarts.

    `stop` stops the trainer on every worker (before a restart); `restart_pause` replaces
    the policy's pause (restarts.pause_s) when given."""
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
            state, ending = _watch(where, queued, gcloud, sleep, poll, hang_s)
            if ending is not None:
                worker, code, why = ending
                if why is None and code == 0:
                    _say("training ended with exit code 0 on every worker")
                    return 0
                if why is None or restarted == max_restarts:
                    _say(f"training ended with exit code {code} ({worker}{why or ''})")
                    gcloud(stop)  # the job ends everywhere: no worker left hung or waiting
                    return code
                restarted += 1
                pause = restarts.pause_s(code) if restart_pause is None else restart_pause
                _say(f"{worker}{why}")
                _say(restarts.announce("worker", code, pause, restarted, max_restarts))
                gcloud(stop)  # the workers still running or waiting on the one that stopped
                sleep(pause)
                continue
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


def _watch(
    where, queued, gcloud, sleep, poll, hang_s
) -> tuple[str | None, tuple[str, int, str | None] | None]:
    """Polls until the job ends (state, (worker, exit code, why it restarts or None)) or
    the slice is lost (state, None); see the module docstring for the order."""
    while True:
        sleep(poll)
        state = _state(where, queued, gcloud)
        if state not in _UP:
            return state, None
        code, out = gcloud(commands.ssh(*where, "all", remote.outcome(), queued))
        if code != 0:
            continue  # a worker did not answer this time; the slice's state says if it is lost
        outcomes = _outcomes(out)
        ending = _verdict(outcomes, hang_s)
        if ending is not None:
            return state, ending
        if any(word == "absent" for word, _ in outcomes.values()):  # a VM restarted
            return "TRAINER_GONE", None


def _outcomes(out: str) -> dict[str, tuple[str, int | None]]:
    """remote.outcome's lines, by worker: (word, number or None)."""
    outcomes = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "worker":
            number = int(words[3]) if len(words) > 3 and words[3].lstrip("-").isdigit() else None
            outcomes[f"worker {words[1]}"] = (words[2], number)
    return outcomes


def _verdict(
    outcomes: dict[str, tuple[str, int | None]], hang_s: float
) -> tuple[str, int, str | None] | None:
    """The job's ending in these outcomes, if any: (worker, code, why it restarts or None)."""
    exits = {w: n for w, (word, n) in outcomes.items() if word == "exit" and n is not None}
    for worker, code in exits.items():
        if code != 0 and restarts.cause(code) is None:
            return worker, code, None
    for worker, (word, _) in outcomes.items():
        if word == "stopped":
            return f"{worker}, stopped by `launch stop`", STOPPED_EXIT_CODE, None
    for worker, code in exits.items():
        if code != 0:
            return worker, code, f" exited with code {code}"
    for worker, (word, age) in outcomes.items():
        if word == "running" and age is not None and age > hang_s:
            why = f" made no training progress for {age} s (--hang-timeout={hang_s:g}): hung"
            return worker, PEER_LOST_EXIT_CODE, why
    if outcomes and all(outcome == ("exit", 0) for outcome in outcomes.values()):
        return "every worker", 0, None
    return None


def _say(message: str) -> None:
    print(f"launch run: {message}", file=sys.stderr, flush=True)


def _fail(message: str) -> int:
    print(f"launch run: error: {message}", file=sys.stderr, flush=True)
    return 1
