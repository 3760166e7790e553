"""The shell scripts run on every TPU worker, for `gcloud ... ssh --command`.

This is the quoting boundary. The fixed parts below are ours and written raw, so that
`~` and `$(hostname)` expand on the worker; every value from a user or a config enters
only through `shlex.quote`. A script has one statement (or one part of an `if`) per line,
so the printed command that carries it reads as a script.
"""

import shlex
from collections.abc import Sequence

from xlnet_jax.launch import shell
from xlnet_jax.run.heartbeat import HEARTBEAT_ENV

PROJECT_DIR = "~/xlnet-jax"  # The project's source on each worker.
VENV = "~/xlnet-jax-venv"  # Kept across `setup` runs, so reinstalls are quick.
TARBALL = "xlnet-jax-src.tar.gz"  # Where `setup` copies the source, relative to home.
LOG_DIR = "~/xlnet-jax-logs"
LOG_FILE = f"{LOG_DIR}/train-$(hostname).log"  # One per worker, named by its hostname.
PID_FILE = f"{LOG_DIR}/train.pid"  # The trainer's session and process group id.
EXIT_FILE = f"{LOG_DIR}/train.exit"  # The trainer's exit code, written when it ends.
STOP_FILE = f"{LOG_DIR}/train.stopped"  # Written by `stop`: the user asked it to stop.
HEARTBEAT_FILE = f"{LOG_DIR}/train.heartbeat"  # Touched by the loop at each step.

# Defines `running`: true while any process of the trainer's process group (the session the
# wrapper leads; its id is in the pid file, and in $pid) is an xlnet-jax process: a trainer
# whose wrapper died still counts, a stale or reused id does not. The first line of every
# script that asks.
_RUNNING = (
    f"running() {{ pid=$(cat {PID_FILE} 2>/dev/null) || return 1; "
    'for p in $(pgrep -g "$pid"); do grep -qs xlnet-jax "/proc/$p/cmdline" && return 0; done; '
    "return 1; }"
)  # fmt: skip
# Defines `worker`: this worker's name in `launch run`'s outcome lines (its hostname, which
# on a TPU VM ends in -w-N, N the worker's index).
_WORKER = 'worker="worker $(hostname)"'


# The installer itself is pinned too; everything else comes from the constraints file.
PIP_PIN = "pip==26.3"


def _lines(*lines: str) -> str:
    """A script of one statement (or one part of an if) per line."""
    return "\n".join(lines)


def constraints_file(python: str) -> str:
    """The exact versions CI tests on for `python` (python3.11 -> scripts/constraints/py311.txt),
    relative to the project's root: the file scripts/venv.sh installs from."""
    return f"scripts/constraints/py{python.removeprefix('python').replace('.', '')}.txt"


def _install_python(python: str) -> str:
    """Installs `python` and its venv module from apt unless the worker has it already."""
    q = shlex.quote
    return _lines(
        f"if ! command -v {q(python)} >/dev/null; then",
        f"  sudo apt-get update -qq && sudo apt-get install -y -qq {q(python)} "
        f"{q(python + '-venv')} || exit 1",
        "fi",
    )


def _install_project(python: str) -> str:
    """Creates the venv once per interpreter, then installs the checked-out project with the
    tpu extra at the versions of `python`'s constraints file: the same on every worker."""
    q = shlex.quote
    constraints = q(constraints_file(python))
    return _lines(
        f"if [ ! -x {VENV}/bin/{q(python)} ]; then",
        f"  rm -rf {VENV}",
        f"  {q(python)} -m venv {VENV} || exit 1",
        "fi",
        f"cd {PROJECT_DIR} || exit 1",
        f"if [ ! -f {constraints} ]; then",
        f'  echo "$(hostname)": no pinned versions for {q(python)}, no {constraints}: pass '
        "another --python >&2",
        "  exit 1",
        "fi",
        f"{VENV}/bin/pip install -q {PIP_PIN} || exit 1",
        f'{VENV}/bin/pip install -q -c {constraints} -e ".[tpu]"',
    )


def setup_from_tarball(python: str) -> str:
    """Unpacks the copied source tarball into a fresh project dir and installs it."""
    return _lines(
        _install_python(python),
        f"rm -rf {PROJECT_DIR} && mkdir -p {PROJECT_DIR} && "
        f"tar -xzf {TARBALL} -C {PROJECT_DIR} || exit 1",
        _install_project(python),
    )


def setup_from_git(python: str, repo: str, ref: str | None) -> str:
    """Clones `repo` (at `ref`, else its default branch) into a fresh project dir; installs."""
    q = shlex.quote
    clone = f"rm -rf {PROJECT_DIR} && git clone -q -- {q(repo)} {PROJECT_DIR}"
    if ref is not None:
        clone += f" && git -C {PROJECT_DIR} checkout -q {q(ref)} --"
    return _lines(_install_python(python), clone + " || exit 1", _install_project(python))


# Runs "$@" (the trainer's argv, after $0) and writes its exit code to EXIT_FILE. It leads
# the session (setsid), whose id it writes to PID_FILE. SIGTERM is passed on to the
# trainer, and waited for: `wait` returns early when a trap runs.
_WRAPPER = _lines(
    f"echo $$ > {PID_FILE}",
    'trap "kill -TERM \\$c" TERM',
    '"$@" & c=$!',
    "wait $c; s=$?",
    "while kill -0 $c 2>/dev/null; do wait $c; s=$?; done",
    f"echo $s > {EXIT_FILE}",
)


def train(train_args: Sequence[str]) -> str:
    """Starts `xlnet-jax <train_args>` in the background, logging to LOG_FILE.

    Refuses to start a second run on a worker where any process of the last one lives.
    The process outlives the ssh session (nohup, all three streams redirected) in a session
    and process group of its own (setsid), whose id goes to PID_FILE: `stop` signals the
    whole group, so no trainer outlives it. A wrapping bash (_WRAPPER) passes SIGTERM on to
    the trainer (so `stop` still lets it checkpoint) and writes its exit code to
    EXIT_FILE, which `launch run` reads to tell a finished run from a lost one. The loop
    touches HEARTBEAT_FILE at each step ($XLNET_JAX_HEARTBEAT), for `launch run`'s hang
    bound. The trainer's argv reaches the wrapper as its arguments, quoted once.
    """
    return _lines(
        f"mkdir -p {LOG_DIR} || exit 1",
        _RUNNING,
        "if running; then",
        '  echo "$(hostname): already training (process group $pid); stop it first" >&2',
        "  exit 1",
        "fi",
        f"cd {PROJECT_DIR} || exit 1",
        f"rm -f {EXIT_FILE} {STOP_FILE}",
        f"touch {HEARTBEAT_FILE} || exit 1",
        f"{HEARTBEAT_ENV}={HEARTBEAT_FILE} setsid nohup \\",
        f"  bash -c {shlex.quote(_WRAPPER)} xlnet-jax \\",
        f"  {VENV}/bin/xlnet-jax {shell.continued(train_args, indent='  ')} \\",
        f"  > {LOG_FILE} 2>&1 < /dev/null &",
        f"echo $! > {PID_FILE}",
        f'echo "$(hostname): training (pid $!), log {LOG_FILE}"',
    )


def outcome() -> str:
    """Prints one line, `worker NAME` and then: `running S` (S: seconds since the loop's last
    heartbeat), `stopped` (`stop` ended it: the user asked), `exit N` (the trainer's code)
    or `absent` (never started, or lost with its VM)."""
    return _lines(
        _RUNNING,
        _WORKER,
        "if running; then",
        f'  echo "$worker running $(( $(date +%s) - $(stat -c %Y {HEARTBEAT_FILE} '
        '2>/dev/null || date +%s) ))"',
        f"elif [ -f {STOP_FILE} ]; then",
        '  echo "$worker stopped"',
        f"elif [ -f {EXIT_FILE} ]; then",
        f'  echo "$worker exit $(cat {EXIT_FILE})"',
        "else",
        '  echo "$worker absent"',
        "fi",
    )


def status() -> str:
    """Prints whether the worker is training, then the last line of its log."""
    return _lines(
        _RUNNING,
        "if running; then",
        '  echo "$(hostname): training (process group $pid)"',
        "else",
        '  echo "$(hostname): not training"',
        "fi",
        f"tail -n 1 {LOG_FILE} 2>/dev/null || true",
    )


def logs(lines: int, follow: bool) -> str:
    """Prints the last `lines` lines of the worker's log; with `follow`, keeps printing."""
    return f"tail -n {int(lines)}{' -F' if follow else ''} {LOG_FILE}"


def stop(grace_seconds: int) -> str:
    """Marks the run stopped by request (STOP_FILE), sends SIGTERM to the trainer's whole
    process group, waits up to `grace_seconds` for its save, then SIGKILLs the group and
    waits until none of it is left.

    SIGTERM alone is not enough: after `jax.distributed.initialize` JAX catches SIGTERM
    as a preemption notice, and the process only exits if the train loop acts on it.
    """
    return _lines(
        _RUNNING,
        "if ! running; then",
        '  echo "$(hostname): not training"',
        "  exit 0",
        "fi",
        f"touch {STOP_FILE}",
        'kill -TERM -- "-$pid"',
        f"for _ in $(seq {int(grace_seconds)}); do running || break; sleep 1; done",
        "if ! running; then",
        '  echo "$(hostname): stopped process group $pid"',
        "  exit 0",
        "fi",
        'kill -KILL -- "-$pid"',
        "for _ in $(seq 50); do running || break; sleep 0.1; done",
        "if running; then",
        '  echo "$(hostname): process group $pid survived SIGKILL" >&2',
        "  exit 1",
        "fi",
        'echo "$(hostname): killed process group $pid"',
    )
