"""The launcher: exact dry-run commands, inert hostile values, and the local backend.

No gcloud here: TPU subcommands are checked through --dry-run, whose printed commands bash
reads back into argvs (tests/launch_printed.py), and their worker scripts by running the
printed lines in bash against a stand-in `gcloud` (which runs the ssh script in a fake
worker home) and a stand-in `xlnet-jax`. The local backend runs a small stand-in train
program that checks its flags.
"""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.launch_printed import read_back
from xlnet_jax.launch import commands, local, pod, remote, shell

pytestmark = pytest.mark.usefixtures("committed_tree")
REPO = Path(__file__).resolve().parents[1]
TPU = ["--name", "xlnet-v3", "--zone", "europe-west4-a", "--project", "my-project"]
GCLOUD = ["gcloud", "compute", "tpus", "tpu-vm"]
WHERE = ["--zone=europe-west4-a", "--project=my-project"]
SSH = [*GCLOUD, "ssh", "xlnet-v3", *WHERE, "--worker=all", "--command"]
RUNNING = (
    "running() { pid=$(cat ~/xlnet-jax-logs/train.pid 2>/dev/null) || return 1; "
    'for p in $(pgrep -g "$pid"); do grep -qs xlnet-jax "/proc/$p/cmdline" && return 0; done; '
    "return 1; }\n"
)
# Shell syntax that, if it ever ran, would leave PWNED* files (and nothing worse).
HOSTILE = "a b'c\"d; touch PWNED1 $(touch PWNED2) `touch PWNED3` $HOME ~\nx & touch PWNED4 > w"


def dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Stdout of `xlnet-jax launch ARGV --dry-run`, which must succeed."""
    assert pod.main([*argv, "--dry-run"]) == 0
    return capsys.readouterr().out


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[list[str]]:
    """The commands `xlnet-jax launch ARGV --dry-run` prints, as bash reads them."""
    return read_back(dry_run(capsys, *argv))


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Stderr of `xlnet-jax launch ARGV --dry-run`, which must fail as a usage error."""
    assert pod.main([*argv, "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


# --- The v3-32 job, command by command -------------------------------------------------


def test_create_dry_run(capsys):
    assert printed(capsys, "create", *TPU, "--accelerator-type", "v3-32", "--spot") == [
        [*GCLOUD, "create", "xlnet-v3", *WHERE, "--accelerator-type=v3-32",
         "--version=tpu-ubuntu2204-base", "--spot"],
    ]  # fmt: skip
    assert printed(capsys, "create", *TPU, "--accelerator-type", "v3-32", "--queued") == [
        ["gcloud", "compute", "tpus", "queued-resources", "create", "xlnet-v3",
         "--node-id=xlnet-v3", *WHERE, "--accelerator-type=v3-32",
         "--runtime-version=tpu-ubuntu2204-base"],
    ]  # fmt: skip


INSTALL_PYTHON = """\
if ! command -v python3.11 >/dev/null; then
  sudo apt-get update -qq && sudo apt-get install -y -qq python3.11 python3.11-venv || exit 1
fi
"""
INSTALL_PROJECT = """
if [ ! -x ~/xlnet-jax-venv/bin/python3.11 ]; then
  rm -rf ~/xlnet-jax-venv
  python3.11 -m venv ~/xlnet-jax-venv || exit 1
fi
cd ~/xlnet-jax || exit 1
if [ ! -f scripts/constraints/py311.txt ]; then
  echo "$(hostname)": no pinned versions for python3.11, no scripts/constraints/py311.txt: \
pass another --python >&2
  exit 1
fi
~/xlnet-jax-venv/bin/pip install -q pip==26.3 || exit 1
~/xlnet-jax-venv/bin/pip install -q -c scripts/constraints/py311.txt -e ".[tpu]\""""


def test_setup_dry_run(capsys):
    assert printed(capsys, "setup", *TPU) == [
        ["git", "-C", ".", "archive", "--format=tar.gz", "--output=/tmp/xlnet-jax-src.tar.gz",
         "HEAD"],
        [*GCLOUD, "scp", "/tmp/xlnet-jax-src.tar.gz", "xlnet-v3:xlnet-jax-src.tar.gz", *WHERE,
         "--worker=all"],
        [*SSH, f"{INSTALL_PYTHON}rm -rf ~/xlnet-jax && mkdir -p ~/xlnet-jax && "
         f"tar -xzf xlnet-jax-src.tar.gz -C ~/xlnet-jax || exit 1{INSTALL_PROJECT}"],
    ]  # fmt: skip
    repo = ["--repo", "https://github.com/me/xlnet-jax", "--ref", "v1"]
    assert printed(capsys, "setup", *TPU, *repo) == [
        [*SSH, f"{INSTALL_PYTHON}rm -rf ~/xlnet-jax && git clone -q -- "
         "https://github.com/me/xlnet-jax ~/xlnet-jax && git -C ~/xlnet-jax checkout -q v1 -- "
         f"|| exit 1{INSTALL_PROJECT}"],
    ]  # fmt: skip


def test_train_dry_run(capsys):
    argv = ["--config", "configs/base.py", "--workdir", "gs://my-bucket/xlnet-base",
            "--config.num_train_steps=100000"]  # fmt: skip
    wrapper = (
        "echo $$ > ~/xlnet-jax-logs/train.pid\n"
        'trap "kill -TERM \\$c" TERM\n'
        '"$@" & c=$!\n'
        "wait $c; s=$?\n"
        "while kill -0 $c 2>/dev/null; do wait $c; s=$?; done\n"
        "echo $s > ~/xlnet-jax-logs/train.exit"
    )
    script = (
        "mkdir -p ~/xlnet-jax-logs || exit 1\n"
        f"{RUNNING}"
        "if running; then\n"
        '  echo "$(hostname): already training (process group $pid); stop it first" >&2\n'
        "  exit 1\n"
        "fi\n"
        "cd ~/xlnet-jax || exit 1\n"
        "rm -f ~/xlnet-jax-logs/train.exit ~/xlnet-jax-logs/train.stopped\n"
        "touch ~/xlnet-jax-logs/train.heartbeat || exit 1\n"
        "XLNET_JAX_HEARTBEAT=~/xlnet-jax-logs/train.heartbeat setsid nohup \\\n"
        f"  bash -c {shlex.quote(wrapper)} xlnet-jax \\\n"
        "  ~/xlnet-jax-venv/bin/xlnet-jax train \\\n"
        "  --distributed \\\n"
        "  --config=configs/base.py \\\n"
        "  --workdir=gs://my-bucket/xlnet-base \\\n"
        "  --config.num_train_steps=100000 \\\n"
        "  > ~/xlnet-jax-logs/train-$(hostname).log 2>&1 < /dev/null &\n"
        "echo $! > ~/xlnet-jax-logs/train.pid\n"
        'echo "$(hostname): training (pid $!), log ~/xlnet-jax-logs/train-$(hostname).log"'
    )
    assert printed(capsys, "train", *TPU, *argv) == [[*SSH, script]]


def test_status_logs_stop_delete_dry_run(capsys):
    assert printed(capsys, "status", *TPU) == [
        [*GCLOUD, "describe", "xlnet-v3", *WHERE],
        [*SSH, f"{RUNNING}if running; then\n"
         '  echo "$(hostname): training (process group $pid)"\n'
         "else\n"
         '  echo "$(hostname): not training"\n'
         "fi\n"
         "tail -n 1 ~/xlnet-jax-logs/train-$(hostname).log 2>/dev/null || true"],
    ]  # fmt: skip
    assert printed(capsys, "logs", *TPU, "--worker", "3", "--lines", "50", "--follow") == [
        [*GCLOUD, "ssh", "xlnet-v3", *WHERE, "--worker=3", "--command",
         "tail -n 50 -F ~/xlnet-jax-logs/train-$(hostname).log"],
    ]  # fmt: skip
    assert printed(capsys, "stop", *TPU, "--grace", "120") == [
        [*SSH, f"{RUNNING}if ! running; then\n"
         '  echo "$(hostname): not training"\n'
         "  exit 0\n"
         "fi\n"
         "touch ~/xlnet-jax-logs/train.stopped\n"
         'kill -TERM -- "-$pid"\n'
         "for _ in $(seq 120); do running || break; sleep 1; done\n"
         "if ! running; then\n"
         '  echo "$(hostname): stopped process group $pid"\n'
         "  exit 0\n"
         "fi\n"
         'kill -KILL -- "-$pid"\n'
         "for _ in $(seq 50); do running || break; sleep 0.1; done\n"
         "if running; then\n"
         '  echo "$(hostname): process group $pid survived SIGKILL" >&2\n'
         "  exit 1\n"
         "fi\n"
         'echo "$(hostname): killed process group $pid"'],
    ]  # fmt: skip
    assert printed(capsys, "delete", *TPU) == [[*GCLOUD, "delete", "xlnet-v3", *WHERE]]
    assert printed(capsys, "delete", *TPU, "--queued", "--yes") == [
        ["gcloud", "compute", "tpus", "queued-resources", "delete", "xlnet-v3", *WHERE,
         "--force", "--quiet"],
    ]  # fmt: skip


# --- What is printed is what runs, and reads as shell -----------------------------------

SUBCOMMANDS = [
    ["create", *TPU, "--accelerator-type", "v5litepod-64", "--spot", "--labels", "run=a"],
    ["setup", *TPU],
    ["setup", *TPU, "--source", HOSTILE, "--tarball", f"/tmp/{HOSTILE}", "--queued"],
    ["setup", *TPU, "--repo", HOSTILE, "--ref", HOSTILE],
    ["train", *TPU, "--config", HOSTILE, "--workdir", HOSTILE, f"--config.a={HOSTILE}"],
    ["status", *TPU],
    ["logs", *TPU, "--worker", "all", "--follow"],
    ["stop", *TPU, "--queued"],
    ["delete", *TPU, "--queued", "--yes"],
]


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=[argv[0] for argv in SUBCOMMANDS])
def test_what_a_dry_run_prints_is_what_runs(capsys, argv):
    """bash reads the printed lines back as exactly the argvs the launcher executes."""
    args = pod._parse([*argv, "--dry-run"])
    assert printed(capsys, *argv) == pod._TPU_SUBCOMMANDS[args.command](args)


def test_run_prints_the_commands_of_its_first_attempt(capsys):
    argv = ["run", *TPU, "--accelerator-type", "v3-32", "--config", "c.py",
            "--workdir", "gs://b/w"]  # fmt: skip
    args = pod._parse(argv)
    capsys.readouterr()
    want = [*pod._create(args), *pod._setup(args), *pod._train(args)]
    assert printed(capsys, *argv) == want


def test_a_long_command_prints_one_option_per_line_and_a_short_one_on_one():
    create = [*GCLOUD, "create", "xl", "--zone=z", "--accelerator-type=v3-32", "--spot"]
    assert shell.command(create) == (
        "gcloud compute tpus tpu-vm create xl --zone=z --accelerator-type=v3-32 --spot"
    )
    create.append("--service-account=trainer@my-project.iam.gserviceaccount.com")
    assert shell.command(create) == (
        "gcloud compute tpus tpu-vm create xl \\\n"
        "    --zone=z \\\n"
        "    --accelerator-type=v3-32 \\\n"
        "    --spot \\\n"
        "    --service-account=trainer@my-project.iam.gserviceaccount.com"
    )
    ssh = ["gcloud", "ssh", "xl", "--command", "a\nb"]  # short, but a value holds a newline
    assert shell.command(ssh) == "gcloud ssh xl \\\n    --command 'a\nb'"


def test_module_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.launch.pod", "delete", *TPU, "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("gcloud compute tpus tpu-vm delete xlnet-v3 ")
    help_text = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.launch.pod", "train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--config.FIELD=VALUE" in help_text and "--num-processes N" in help_text


# --- Hostile values stay inert ------------------------------------------------------------


def worker_words(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The words of the worker script of the one ssh command printed, split as a shell would
    (its line continuations joined)."""
    ((*local_argv, script),) = printed(capsys, *argv)
    assert local_argv[:5] == [*GCLOUD, "ssh"] and local_argv[-1] == "--command"
    return shlex.split(script.replace("\\\n", " "))


def test_hostile_train_values_are_single_arguments(capsys):
    override = f"--config.corpus_dir={HOSTILE}"
    words = worker_words(
        capsys, "train", *TPU, "--config", f"configs/{HOSTILE}.py", "--workdir", HOSTILE, override
    )
    start = words.index("~/xlnet-jax-venv/bin/xlnet-jax") + 1  # the trainer's argv
    assert words[start : words.index(">", start)] == [
        "train", "--distributed", f"--config=configs/{HOSTILE}.py", f"--workdir={HOSTILE}",
        override,
    ]  # fmt: skip


def test_hostile_setup_values_are_single_arguments(capsys):
    words = worker_words(capsys, "setup", *TPU, "--repo", HOSTILE, "--ref", HOSTILE)
    assert words[words.index("clone") + 3] == HOSTILE
    assert words[words.index("checkout") + 2] == HOSTILE
    archive, scp, _ = printed(
        capsys, "setup", *TPU, "--source", HOSTILE, "--tarball", f"/tmp/{HOSTILE}"
    )
    assert archive[2] == HOSTILE
    assert archive[5] == f"--output=/tmp/{HOSTILE}"
    assert scp[5] == f"/tmp/{HOSTILE}"


def test_hostile_values_survive_two_real_shells(tmp_path, capsys):
    """The printed lines, run by bash here and (via a stand-in gcloud) by bash on a worker."""
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / "xlnet-jax").mkdir(parents=True)
    (home / "xlnet-jax-venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    executable(bin_dir / "gcloud", FAKE_GCLOUD)
    executable(home / "xlnet-jax-venv" / "bin" / "xlnet-jax", FAKE_XLNET_JAX)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def launch(*argv: str, code: int = 0) -> str:
        """Prints the command line with --dry-run, runs it in bash; its stdout and stderr."""
        line = dry_run(capsys, *argv, *TPU)
        result = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
        )
        assert result.returncode == code, result.stderr
        return result.stdout + result.stderr

    override = f"--config.corpus_dir={HOSTILE}"
    started = launch("train", "--config", HOSTILE, "--workdir", HOSTILE, override)
    pid = int((home / "xlnet-jax-logs" / "train.pid").read_text())
    try:
        assert f"training (pid {pid})" in started
        argv_file = home / "xlnet-jax" / "argv.json"
        wait_for(lambda: argv_file.exists() and argv_file.read_text().endswith("]"))
        assert json.loads(argv_file.read_text()) == [
            "train",
            "--distributed",
            f"--config={HOSTILE}",
            f"--workdir={HOSTILE}",
            override,
        ]
        assert not list(tmp_path.rglob("PWNED*"))
        assert "training (process group" in launch("status")
        again = launch("train", "--config", "c.py", "--workdir", "gs://b/w", code=1)
        assert "already training" in again
        log = home / "xlnet-jax-logs" / f"train-{socket.gethostname()}.log"
        wait_for(lambda: "fake trainer up" in log.read_text())
        assert "fake trainer up" in launch("logs", "--lines", "5")
        assert f"stopped process group {pid}" in launch("stop", "--grace", "10")
        assert "not training" in launch("status")
    finally:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


FAKE_STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a save that takes 20 s, say
open("trainer.pid", "w").write(str(os.getpid()))
time.sleep(20)
"""


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.parametrize("wrapper_dies", [False, True], ids=["stubborn", "orphaned"])
def test_stop_ends_the_trainer_itself_and_leaves_no_orphan(tmp_path, wrapper_dies):
    """A trainer that ignores SIGTERM for 20 s, its wrapper alive or killed: `outcome` says
    running while it lives, `train` refuses to start beside it, `stop` ends it."""
    home = tmp_path / "home"
    (home / "xlnet-jax").mkdir(parents=True)
    (home / "xlnet-jax-venv" / "bin").mkdir(parents=True)
    executable(home / "xlnet-jax-venv" / "bin" / "xlnet-jax", FAKE_STUBBORN)
    env = {**os.environ, "HOME": str(home)}

    def bash(script: str, code: int = 0) -> str:
        result = subprocess.run(
            ["bash", "-c", script], cwd=home, env=env, capture_output=True, text=True, timeout=30
        )
        assert result.returncode == code, result.stdout + result.stderr
        return result.stdout + result.stderr

    train = remote.train(["train", "--config=c.py", "--workdir=w"])
    bash(train)
    pid_file = home / "xlnet-jax" / "trainer.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    trainer = int(pid_file.read_text())
    try:
        if wrapper_dies:
            os.kill(int((home / "xlnet-jax-logs" / "train.pid").read_text()), signal.SIGKILL)
            time.sleep(0.2)
        assert bash(remote.outcome()).split()[2] == "running"
        assert "already training" in bash(train, code=1)
        started = time.monotonic()
        assert "killed process group" in bash(remote.stop(1))
        assert not _alive(trainer), "the trainer outlived `stop`"
        assert time.monotonic() - started < 10
        assert bash(remote.outcome()).split()[2] == "stopped"
    finally:
        if _alive(trainer):
            os.kill(trainer, signal.SIGKILL)


FAKE_GCLOUD = """
import os, subprocess, sys
args = sys.argv[1:]
assert args[:4] == ["compute", "tpus", "tpu-vm", "ssh"], args
script = args[args.index("--command") + 1]
sys.exit(subprocess.run(["bash", "-c", script], cwd=os.environ["HOME"]).returncode)
"""

FAKE_XLNET_JAX = """
import json, sys, time
json.dump(sys.argv[1:], open("argv.json", "w"))
print("fake trainer up", flush=True)
time.sleep(60)
"""


def executable(path: Path, source: str) -> None:
    path.write_text(f"#!{sys.executable}\n{textwrap.dedent(source)}")
    path.chmod(0o755)


def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["delete", "--name", "my tpu; ls", "--zone", "europe-west4-a"], "--name"),
        (["delete", "--name", "$(id)", "--zone", "europe-west4-a"], "--name"),
        (["delete", "--name", "Bad-Name", "--zone", "europe-west4-a"], "--name"),
        (["delete", "--name", "ok", "--zone", "europe-west4-a;id"], "--zone"),
        (["delete", "--name", "ok", "--zone", "us-east1-d", "--project", "`id`"], "--project"),
        (["create", "--name", "ok", "--zone", "us-central1-a", "--accelerator-type", "v3 32"],
         "--accelerator-type"),
        (["create", "--name", "ok", "--zone", "us-central1-a", "--accelerator-type", "v3-8",
          "--runtime-version", "x\ny"], "--runtime-version"),
        (["create", "--name", "ok", "--zone", "us-central1-a", "--accelerator-type", "v3-8",
          "--queued", "--preemptible"], "--preemptible"),
        (["logs", "--name", "ok", "--zone", "us-central1-a", "--worker", "0;id"], "--worker"),
        (["setup", "--name", "ok", "--zone", "us-central1-a", "--repo=--upload-pack=x"],
         "--repo"),
        (["setup", "--name", "ok", "--zone", "us-central1-a", "--tarball", "host:x"],
         "--tarball"),
        (["setup", "--name", "ok", "--zone", "us-central1-a", "--tarball=-x.tgz"],
         "--tarball"),
        (["setup", "--name", "ok", "--zone", "us-central1-a", "--ref", "main"], "--ref"),
        (["train", "--config", "c.py", "--workdir", "w", "--zone", "us-central1-a"], "--name"),
        (["train", "--config", "c.py", "--workdir", "w", "--backend", "local", "--name", "x"],
         "--name"),
        (["run", "--backend", "local", "--config", "c.py", "--workdir", "w", "--name", "x"],
         "--name"),
        (["run", *TPU, "--accelerator-type", "v3-8", "--config", "c.py", "--workdir", "gs://b/w",
          "--num-processes", "2"], "--num-processes"),
        (["run", "--zone", "us-central1-a", "--accelerator-type", "v3-8", "--config", "c.py",
          "--workdir", "gs://b/w"], "--name"),
        (["train", "--config", "c.py", "--workdir", "w", "--backend", "local", "--port", "7e"],
         "--port"),
        (["train", *TPU, "--config", "c.py", "--workdir", "w", "--config.seed"],
         "--config.FIELD=VALUE"),
        (["train", *TPU, "--config", "c.py", "--workdir", "w", "--config.a;b=1"],
         "--config.FIELD=VALUE"),
        (["stop", *TPU, "--nonsense"], "--nonsense"),
    ],
)  # fmt: skip
def test_invalid_values_are_rejected_naming_the_flag(capsys, argv, flag):
    assert flag in fails(capsys, *argv)


# --- Local backend ------------------------------------------------------------------------

FAKE_TRAIN = """
import json, os, signal, sys, time
args = sys.argv[1:]
assert args[0] == "train", args
flags = dict(a[2:].split("=", 1) for a in args[1:])
i = int(flags["process_id"])
os.makedirs(flags["workdir"], exist_ok=True)
with open(os.path.join(flags["workdir"], f"seen_{i}.json"), "w") as f:
    json.dump(flags, f)
print(f"hello from process {i}", flush=True)
if flags.get("config.ignore_sigterm") == str(i):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if flags.get("config.exit_once") and not os.path.exists(os.path.join(flags["workdir"], "exited")):
    if i == 1:
        open(os.path.join(flags["workdir"], "exited"), "w").close()
        sys.exit(int(flags["config.exit_once"]))
    time.sleep(60)  # stopped by the launcher
if flags.get("config.fail_together"):  # process 1's own error, then process 0 loses it
    mark = os.path.join(flags["workdir"], "failing")
    if i == 1:
        open(mark, "w").close()
        sys.exit(1)
    while not os.path.exists(mark):
        time.sleep(0.01)
    sys.exit(5)
if flags.get("config.fail") == str(i):
    time.sleep(float(flags.get("config.fail_after", 0)))
    print("ValueError: boom", file=sys.stderr)
    print("noise\\n" * 30, file=sys.stderr)
    sys.exit(int(flags.get("config.exit_code", 3)))
time.sleep(float(flags.get("config.sleep", 0)))
print(f"process {i} done", flush=True)
"""


@pytest.fixture
def fake_train(tmp_path) -> list[str]:
    script = tmp_path / "fake_train.py"
    script.write_text(textwrap.dedent(FAKE_TRAIN))
    return [sys.executable, str(script)]


def local_train(fake_train, workdir: Path, *extra: str) -> int:
    argv = [
        "train",
        "--backend",
        "local",
        "--num-processes",
        "2",
        "--num-cpu-devices",
        "2",
        "--config",
        "configs/tiny.py",
        "--workdir",
        str(workdir),
        "--timeout",
        "30",
        *extra,
    ]
    return pod.main(argv, local_program=fake_train)


def test_local_runs_processes_with_distinct_ids_and_one_coordinator(tmp_path, capsys, fake_train):
    workdir = tmp_path / "run"
    assert local_train(fake_train, workdir, "--config.seed=7") == 0
    seen = [json.loads((workdir / f"seen_{i}.json").read_text()) for i in range(2)]
    assert [s["process_id"] for s in seen] == ["0", "1"]
    assert seen[0]["coordinator_address"] == seen[1]["coordinator_address"]
    assert seen[0]["coordinator_address"].startswith("127.0.0.1:")
    for s in seen:
        assert s["num_processes"] == "2" and s["num_cpu_devices"] == "2"
        assert s["config"] == "configs/tiny.py" and s["workdir"] == str(workdir)
        assert s["config.seed"] == "7"
    for i in range(2):
        log = (workdir / "logs" / f"process_{i}.log").read_text()
        assert f"hello from process {i}" in log and f"process {i} done" in log
    captured = capsys.readouterr()
    assert "hello from process 0" in captured.out  # Process 0's log is echoed.
    assert "hello from process 1" not in captured.out


def test_local_failure_stops_the_others_and_names_the_log(tmp_path, capsys, fake_train):
    workdir = tmp_path / "run"
    start = time.monotonic()
    code = local_train(fake_train, workdir, "--config.fail=1", "--config.sleep=60")
    assert code == 3
    assert time.monotonic() - start < 15
    err = capsys.readouterr().err
    assert f"process 1 exited with code 3; its log: {workdir / 'logs' / 'process_1.log'}" in err
    assert "first exception in the log: ValueError: boom" in err
    assert "  | noise" in err  # The tail of the failed process's log.
    pid_0 = int(re.search(r"process 0: pid (\d+)", err).group(1))
    alive = Path(f"/proc/{pid_0}").exists()
    if alive:
        os.kill(pid_0, signal.SIGKILL)
    assert not alive, "process 0 was left running"


def test_local_reports_the_final_failure_of_processes_that_fail_together(
    tmp_path, capsys, fake_train, monkeypatch
):
    """Process 1's own error (1) and process 0's lost peer (5), seen in one poll: 1, as on a
    pod, and no restart."""
    monkeypatch.setattr(local, "POLL_SECONDS", 1.0)
    workdir = tmp_path / "run"
    code = local_train(fake_train, workdir, "--config.fail_together=1", "--max-restarts", "2")
    assert code == 1
    err = capsys.readouterr().err
    assert "process 1 exited with code 1" in err and "training again" not in err


def test_local_stops_a_job_whose_process_is_hung(tmp_path, capsys, fake_train):
    """No heartbeat from the training loop for --hang-timeout: the job lost a process."""
    start = time.monotonic()
    code = local_train(fake_train, tmp_path / "run", "--config.sleep=60", "--hang-timeout", "1")
    assert code == 5 and time.monotonic() - start < 15
    err = capsys.readouterr().err
    assert "made no training progress for" in err and "(--hang-timeout=1): hung" in err


def test_local_timeout(tmp_path, capsys, fake_train):
    code = local_train(fake_train, tmp_path / "run", "--config.sleep=60", "--timeout", "1")
    assert code == 124
    assert "timed out after 1 s" in capsys.readouterr().err


def test_local_kills_a_process_that_ignores_sigterm(tmp_path, capsys, fake_train):
    cmds = commands.local_train(
        fake_train,
        local.free_port(),
        2,
        1,
        "c.py",
        str(tmp_path),
        [
            "--config.fail=1",
            "--config.fail_after=1",
            "--config.ignore_sigterm=0",
            "--config.sleep=60",
        ],
    )
    start = time.monotonic()
    assert local.run(cmds, tmp_path / "logs", timeout=30, grace_seconds=0.5) == 3
    assert time.monotonic() - start < 10
    assert "process 0 done" not in (tmp_path / "logs" / "process_0.log").read_text()


def test_local_dry_run_picks_one_free_port_and_keeps_override_order(capsys):
    argv = "train --config.a=x_y --backend local --num-processes 3 --config c.py --config.b=1"
    out = dry_run(capsys, *argv.split(), "--config.a=2 3", "--workdir", "w", "--config.a=4")
    argvs = read_back(out, programs=[sys.executable])
    assert len(argvs) == 3
    port = argvs[0][4].removeprefix("--coordinator_address=127.0.0.1:")
    assert 0 < int(port) < 65536
    for i, words in enumerate(argvs):
        assert words == [
            sys.executable, "-m", "xlnet_jax.cli", "train",
            f"--coordinator_address=127.0.0.1:{port}", "--num_processes=3", f"--process_id={i}",
            "--num_cpu_devices=1", "--config=c.py", "--workdir=w",
            "--config.a=x_y", "--config.b=1", "--config.a=2 3", "--config.a=4",
        ]  # fmt: skip


def _starts(log: Path) -> int:
    return log.read_text().count("hello from process 1")


@pytest.mark.parametrize("code", [5, 4, 137])
def test_local_run_restarts_the_job_after_a_lost_process(tmp_path, capsys, fake_train, code):
    workdir = tmp_path / "run"
    argv = ["run", "--backend", "local", "--config", "c.py", "--workdir", str(workdir),
            "--timeout", "30", "--restart-pause", "0", f"--config.exit_once={code}"]  # fmt: skip
    assert pod.main(argv, local_program=fake_train) == 0
    assert _starts(workdir / "logs" / "process_1.log") == 2  # appended: both starts
    err = capsys.readouterr().err
    assert f"(exit code {code}); training again in 0 s on every process" in err
    assert "(restart 1 of 5)" in err


def test_local_train_restarts_only_with_max_restarts_and_counts_them(tmp_path, capsys, fake_train):
    workdir = tmp_path / "run"
    assert local_train(fake_train, workdir, "--config.exit_once=5") == 5
    assert "training again" not in capsys.readouterr().err
    (workdir / "exited").unlink()
    code = local_train(fake_train, workdir, "--config.exit_once=5", "--max-restarts", "1",
                       "--restart-pause", "0")  # fmt: skip
    assert code == 0 and "(restart 1 of 1)" in capsys.readouterr().err


def test_local_run_gives_up_after_max_restarts_and_does_not_retry_own_errors(
    tmp_path, capsys, fake_train
):
    argv = ["run", "--backend", "local", "--config", "c.py", "--timeout", "30",
            "--restart-pause", "0", "--max-restarts", "2"]  # fmt: skip
    lost = [*argv, "--workdir", str(tmp_path / "a"), "--config.fail=1", "--config.exit_code=5"]
    assert pod.main(lost, local_program=fake_train) == 5
    err = capsys.readouterr().err
    assert "(restart 2 of 2)" in err and "after 2 restart(s) (--max-restarts=2)" in err
    own = [*argv, "--workdir", str(tmp_path / "b"), "--config.fail=1"]
    assert pod.main(own, local_program=fake_train) == 3
    assert "training again" not in capsys.readouterr().err


def test_local_backend_takes_a_gs_workdir_and_logs_locally(tmp_path, capsys, fake_train,
                                                            monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert local_train(fake_train, "gs://bucket/runs/a") == 0
    log = tmp_path / "xlnet-jax-logs" / "bucket" / "runs" / "a" / "process_1.log"
    assert "process 1 done" in log.read_text()
    assert local_train(fake_train, "gs://bucket/runs/a", "--log-dir", "here") == 0
    assert "process 1 done" in (tmp_path / "here" / "process_1.log").read_text()


def test_a_failure_quotes_this_starts_lines_only(tmp_path, capsys):
    """Logs are appended across starts (a restart's log shows why it restarted), each start
    after its own header; the launcher's excerpt of a failure is from this start alone
    (issue 61: a SIGKILLed run quoted a failed start's error of minutes earlier)."""
    fail = "import sys; print({!r}); sys.exit(3)"
    logs = tmp_path / "logs"
    first = [[sys.executable, "-c", fail.format("Traceback: the first start's error")]]
    assert local.run(first, logs, timeout=60, grace_seconds=0.5) == 3
    capsys.readouterr()
    second = [[sys.executable, "-c", fail.format("the second start's own line")]]
    assert local.run(second, logs, timeout=60, grace_seconds=0.5) == 3
    said = capsys.readouterr().err
    assert "the second start's own line" in said and "first start" not in said, said
    text = (logs / "process_0.log").read_text()
    assert text.count("==== xlnet-jax launch: a new start at ") == 2 and "first start" in text


SIGNAL_RECORDER = """
import os, signal, sys, time
flag = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
out = flag["workdir"] + "." + flag["process_id"]
def record(signum, frame):
    with open(out, "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    if signum == signal.SIGTERM:
        time.sleep(0.5)  # a save
        sys.exit(6)
signal.signal(signal.SIGINT, record)
signal.signal(signal.SIGTERM, record)
open(out, "a").close()
while True:
    time.sleep(0.05)
"""


def test_ctrl_c_in_the_terminal_reaches_the_processes_as_one_sigterm(tmp_path):
    """A terminal's Ctrl-C signals its whole foreground process group. The local backend's
    processes run in sessions of their own, so only the launcher gets the SIGINT; it sends
    each process one SIGTERM (the preemption notice on which a trainer saves and releases
    its lease), waits for them, and exits 130."""
    script = tmp_path / "recorder.py"
    script.write_text(SIGNAL_RECORDER)
    workdir = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import sys; from xlnet_jax.launch import pod; sys.exit(pod.main("
         f"sys.argv[1:], local_program=[sys.executable, {str(script)!r}]))", "train",
         "--backend", "local", "--num-processes", "2", "--config", "configs/tiny.py",
         "--workdir", str(workdir), "--log-dir", str(tmp_path / "logs")],
        cwd=REPO, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    started = [Path(f"{workdir}.{i}") for i in range(2)]
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in started):
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.stderr.read()
        time.sleep(0.05)
    os.killpg(launcher.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    assert launcher.wait(timeout=60) == 130
    said = launcher.stderr.read()
    assert "interrupted: every process saves at its next step and stops" in said, said
    assert [p.read_text() for p in started] == ["SIGTERM\n", "SIGTERM\n"]
