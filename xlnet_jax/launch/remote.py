"""The shell scripts run on every TPU worker, for `gcloud ... ssh --command`.

This is the quoting boundary. The fixed parts below are ours and written raw, so that
`~` and `$(hostname)` expand on the worker; every value from a user or a config enters
only through `shlex.quote`. The script is one line (statements joined by `;`), so the
local command that carries it prints on one line unless a user value holds a newline.
"""

import shlex
from collections.abc import Sequence

PROJECT_DIR = "~/xlnet-jax"  # The project's source on each worker.
VENV = "~/xlnet-jax-venv"  # Kept across `setup` runs, so reinstalls are quick.
TARBALL = "xlnet-jax-src.tar.gz"  # Where `setup` copies the source, relative to home.
LOG_DIR = "~/xlnet-jax-logs"
LOG_FILE = f"{LOG_DIR}/train-$(hostname).log"  # One per worker, named by its hostname.
PID_FILE = f"{LOG_DIR}/train.pid"
EXIT_FILE = f"{LOG_DIR}/train.exit"  # The trainer's exit code, written when it ends.

# True when the pid file names a live xlnet-jax process (not a stale, reused pid).
_RUNNING = f'pid=$(cat {PID_FILE} 2>/dev/null) && grep -qs xlnet-jax "/proc/$pid/cmdline"'


# The installer itself is pinned too; everything else comes from the constraints file.
PIP_PIN = "pip==26.3"


def constraints_file(python: str) -> str:
    """The exact versions CI tests on for `python` (python3.11 -> scripts/constraints/py311.txt),
    relative to the project's root: the file scripts/venv.sh installs from."""
    return f"scripts/constraints/py{python.removeprefix('python').replace('.', '')}.txt"


def _install_python(python: str) -> str:
    """Installs `python` and its venv module from apt unless the worker has it already."""
    q = shlex.quote
    return (
        f"if ! command -v {q(python)} >/dev/null; then sudo apt-get update -qq && "
        f"sudo apt-get install -y -qq {q(python)} {q(python + '-venv')} || exit 1; fi"
    )


def _install_project(python: str) -> str:
    """Creates the venv once per interpreter, then installs the checked-out project with the
    tpu extra at the versions of `python`'s constraints file: the same on every worker."""
    q = shlex.quote
    constraints = q(constraints_file(python))
    return (
        f"if [ ! -x {VENV}/bin/{q(python)} ]; then rm -rf {VENV}; "
        f"{q(python)} -m venv {VENV} || exit 1; fi; "
        f"cd {PROJECT_DIR} || exit 1; "
        f'if [ ! -f {constraints} ]; then echo "$(hostname)": no pinned versions for '
        f"{q(python)}, no {constraints}: pass another --python >&2; exit 1; fi; "
        f"{VENV}/bin/pip install -q {PIP_PIN} && "
        f"{VENV}/bin/pip install -q -c {constraints} -e '.[tpu]'"
    )


def setup_from_tarball(python: str) -> str:
    """Unpacks the copied source tarball into a fresh project dir and installs it."""
    return "; ".join(
        [
            _install_python(python),
            f"rm -rf {PROJECT_DIR} && mkdir -p {PROJECT_DIR} && "
            f"tar -xzf {TARBALL} -C {PROJECT_DIR} || exit 1",
            _install_project(python),
        ]
    )


def setup_from_git(python: str, repo: str, ref: str | None) -> str:
    """Clones `repo` (at `ref`, else its default branch) into a fresh project dir; installs."""
    q = shlex.quote
    clone = f"rm -rf {PROJECT_DIR} && git clone -q -- {q(repo)} {PROJECT_DIR}"
    if ref is not None:
        clone += f" && git -C {PROJECT_DIR} checkout -q {q(ref)} --"
    return "; ".join([_install_python(python), clone + " || exit 1", _install_project(python)])


def train(train_args: Sequence[str]) -> str:
    """Starts `xlnet-jax <train_args>` in the background, logging to LOG_FILE.

    Refuses to start a second run on a worker that is still training. The process
    outlives the ssh session (nohup, all three streams redirected) and its pid goes to
    PID_FILE for `status` and `stop`. A wrapping bash passes SIGTERM on to the trainer
    (so `stop` still lets it checkpoint) and writes its exit code to EXIT_FILE, which
    `launch run` reads to tell a finished run from a lost one.
    """
    trainer = f"{VENV}/bin/xlnet-jax {shlex.join(train_args)}"
    wrapper = (
        f"trap 'kill -TERM $c' TERM; {trainer} & c=$!; wait $c; s=$?; "
        f"while kill -0 $c 2>/dev/null; do wait $c; s=$?; done; echo $s > {EXIT_FILE}"
    )
    return (
        f"mkdir -p {LOG_DIR} || exit 1; "
        f'if {_RUNNING}; then echo "$(hostname): already training (pid $pid); stop it first" >&2; '
        "exit 1; fi; "
        f"cd {PROJECT_DIR} || exit 1; rm -f {EXIT_FILE}; "
        f"nohup bash -c {shlex.quote(wrapper)} > {LOG_FILE} 2>&1 < /dev/null & "
        f"echo $! > {PID_FILE}; "
        f'echo "$(hostname): training (pid $!), log {LOG_FILE}"'
    )


def outcome() -> str:
    """Prints `running`, `exit N` (the trainer's code) or `absent` (never started or lost)."""
    return (
        f'if {_RUNNING}; then echo running; elif [ -f {EXIT_FILE} ]; then echo "exit $(cat '
        f'{EXIT_FILE})"; else echo absent; fi'
    )


def status() -> str:
    """Prints whether the worker is training, then the last line of its log."""
    return (
        f'if {_RUNNING}; then echo "$(hostname): training (pid $pid)"; '
        f'else echo "$(hostname): not training"; fi; '
        f"tail -n 1 {LOG_FILE} 2>/dev/null; true"
    )


def logs(lines: int, follow: bool) -> str:
    """Prints the last `lines` lines of the worker's log; with `follow`, keeps printing."""
    return f"tail -n {int(lines)}{' -F' if follow else ''} {LOG_FILE}"


def stop(grace_seconds: int) -> str:
    """Sends SIGTERM, waits up to `grace_seconds` for the trainer to exit, then SIGKILL.

    SIGTERM alone is not enough: after `jax.distributed.initialize` JAX catches SIGTERM
    as a preemption notice, and the process only exits if the train loop acts on it.
    """
    return (
        f'if {_RUNNING}; then kill -TERM "$pid"; '
        f"for _ in $(seq {int(grace_seconds)}); do {_RUNNING} || break; sleep 1; done; "
        f'if {_RUNNING}; then kill -KILL "$pid"; echo "$(hostname): killed pid $pid"; '
        f'else echo "$(hostname): stopped pid $pid"; fi; '
        f'else echo "$(hostname): not training"; fi'
    )
