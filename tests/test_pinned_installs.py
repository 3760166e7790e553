"""Pinned installs on pod hosts (issue 38, item 3): `launch setup` installs the constraints
file CI uses for the workers' Python, a run's config.json records the versions it trains
with, and a start with other versions is refused in one line unless --allow_version_change.

The worker script runs in bash here against stand-in `python3.11` and `pip` programs that
record what they were asked; the refusal runs through the real `xlnet-jax train --dry_run`.
"""

import json
import logging
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests import train_harness as harness
from tests.train_config import get_config
from xlnet_jax.errors import ConfigError
from xlnet_jax.launch import pod, remote
from xlnet_jax.training import run_config, run_versions

REPO = Path(__file__).resolve().parents[1]
WHERE = ["--name", "xl", "--zone", "us-east5-a"]


def _dry_run(capsys, *argv: str) -> str:
    assert pod.main([*argv, "--dry-run"]) == 0
    return capsys.readouterr().out


@pytest.mark.usefixtures("committed_tree")
def test_setup_dry_run_shows_the_constraints_file_of_the_workers_python(capsys):
    for python, constraints in (
        ("python3.11", "scripts/constraints/py311.txt"),
        ("python3.12", "scripts/constraints/py312.txt"),
    ):
        out = _dry_run(capsys, "setup", *WHERE, "--python", python)
        assert f"pip install -q -c {constraints} -e " in out
        assert (REPO / constraints).is_file()  # the file CI installs from (scripts/venv.sh)
    assert "-c scripts/constraints/py311.txt" in _dry_run(capsys, "setup", *WHERE)  # default
    assert "-c scripts/constraints/py311.txt" in _dry_run(
        capsys, "setup", *WHERE, "--repo", "https://example.com/x.git"
    )


# Stand-ins: `python3.11 -m venv DIR` makes DIR/bin/{python3.11,pip}; that pip appends its
# argv and working directory to ~/pip.log.
FAKE_PYTHON = """
import os, sys
assert sys.argv[1:3] == ["-m", "venv"], sys.argv
bin_dir = os.path.join(sys.argv[3], "bin")
os.makedirs(bin_dir)
for name, text in (("python3.11", "#!/bin/sh\\n"), ("pip", PIP)):
    with open(os.path.join(bin_dir, name), "w") as f:
        f.write(text)
    os.chmod(os.path.join(bin_dir, name), 0o755)
"""
FAKE_PIP = f"""#!{sys.executable}
import json, os, sys
with open(os.path.expanduser("~/pip.log"), "a") as f:
    f.write(json.dumps([os.getcwd(), *sys.argv[1:]]) + "\\n")
"""


def _worker(tmp_path: Path, with_constraints: bool) -> dict:
    """A worker home holding the shipped tarball, and the environment that runs its script."""
    home, bin_dir, tree = tmp_path / "home", tmp_path / "bin", tmp_path / "tree"
    for directory in (home, bin_dir, tree / "scripts" / "constraints"):
        directory.mkdir(parents=True, exist_ok=True)
    (tree / "setup.py").write_text("")
    if with_constraints:
        (tree / "scripts" / "constraints" / "py311.txt").write_text("jax==0.10.2\n")
    with tarfile.open(home / remote.TARBALL, "w:gz") as tar:
        tar.add(tree, arcname=".")
    python = bin_dir / "python3.11"
    python.write_text(f"#!{sys.executable}\nPIP = {FAKE_PIP!r}\n{textwrap.dedent(FAKE_PYTHON)}")
    python.chmod(0o755)
    return {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _run_setup(env: dict) -> subprocess.CompletedProcess:
    script = remote.setup_from_tarball("python3.11")
    return subprocess.run(  # from the worker's home, as gcloud's ssh runs it
        ["bash", "-c", script], cwd=env["HOME"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_the_worker_installs_at_the_pinned_versions_in_a_venv_of_its_python(tmp_path):
    env = _worker(tmp_path, with_constraints=True)
    home = Path(env["HOME"])
    stale = home / "xlnet-jax-venv" / "bin"  # a venv of another Python: made again
    stale.mkdir(parents=True)
    (stale / "python3.10").write_text("")
    done = _run_setup(env)
    assert done.returncode == 0, done.stderr
    assert not (stale / "python3.10").exists() and (stale / "python3.11").is_file()
    calls = [json.loads(line) for line in (home / "pip.log").read_text().splitlines()]
    project = str(home / "xlnet-jax")
    assert calls == [
        [project, "install", "-q", remote.PIP_PIN],
        [project, "install", "-q", "-c", "scripts/constraints/py311.txt", "-e", ".[tpu]"],
    ]


def test_a_tree_without_the_constraints_file_stops_the_worker_in_one_line(tmp_path):
    env = _worker(tmp_path, with_constraints=False)
    done = _run_setup(env)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.endswith(
        ": no pinned versions for python3.11, no scripts/constraints/py311.txt: pass another "
        "--python"
    )
    assert not (Path(env["HOME"]) / "pip.log").exists()  # nothing installed unpinned


def _saved_run(tmp_path: Path, **changed_versions) -> Path:
    """A workdir whose config.json was saved by this process, its versions then changed."""
    workdir = tmp_path / "run"
    workdir.mkdir(parents=True)
    config = get_config()
    config.corpus_dir = harness.corpus_dir()
    run_config.save(str(workdir), config)
    path = workdir / run_config.CONFIG_FILE
    fields = json.loads(path.read_text())
    assert fields[run_config.VERSIONS_KEY] == run_versions.installed()
    fields[run_config.VERSIONS_KEY].update(changed_versions)
    path.write_text(json.dumps(fields))
    return workdir


def test_the_run_records_its_versions_beside_its_config(tmp_path, caplog):
    workdir = _saved_run(tmp_path)
    installed = run_versions.installed()
    assert {"python", "jax", "jaxlib", "flax", "orbax-checkpoint", "gcsfs"} <= installed.keys()
    loaded = run_config.load(str(workdir))  # a rerun's config: the fields alone
    assert run_config.VERSIONS_KEY not in loaded
    config = get_config()
    config.corpus_dir = harness.corpus_dir()
    assert run_config.changes(loaded, config) == {}
    run_config.check_versions(str(workdir), allow_change=False)  # the same versions: passes

    jax_version = installed["jax"]
    workdir = _saved_run(tmp_path / "other", jax="0.0.1", torn="1.0")
    config_json = workdir / run_config.CONFIG_FILE
    with pytest.raises(ConfigError) as info:
        run_config.check_versions(str(workdir), allow_change=False)
    assert str(info.value) == (
        f"this host's package versions differ from those the run trained with ({config_json}): "
        f"jax 0.0.1 → {jax_version}, torn 1.0 → (none); install the run's versions "
        "(`xlnet-jax launch setup` pins scripts/constraints/py3XY.txt), or pass "
        "--allow_version_change to go on with these."
    )
    with caplog.at_level(logging.INFO, logger=run_versions.__name__):
        run_config.check_versions(str(workdir), allow_change=True)
    assert f"jax 0.0.1 → {jax_version}" in caplog.text


def _train_dry_run(workdir: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "train", "--workdir", str(workdir), "--dry_run",
         *flags],
        env=harness.environment(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_start_with_other_versions_is_refused_in_one_line_unless_allowed(tmp_path):
    workdir = _saved_run(tmp_path, jax="0.0.1")
    refused = _train_dry_run(workdir)
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert line.startswith(
        "xlnet-jax train: error: this host's package versions differ from those the run "
        f"trained with ({workdir / run_config.CONFIG_FILE}): jax 0.0.1 → "
    )
    allowed = _train_dry_run(workdir, "--allow_version_change")
    assert allowed.returncode == 0, allowed.stderr
    assert "dry run: the config and the corpus" in allowed.stdout
    assert "Package versions changed since" in allowed.stderr


@pytest.mark.usefixtures("committed_tree")
def test_launch_train_and_run_pass_allow_version_change_on(capsys, tmp_path):
    train = ["--config", "configs/tiny.py", "--allow_version_change"]
    out = _dry_run(capsys, "train", *train, "--workdir", str(tmp_path), "--backend", "local")
    assert out.count(" --allow_version_change") == 2  # each of the two local processes
    run = ["run", *WHERE, "--accelerator-type", "v4-8", "--workdir", "gs://b/r", *train]
    # the trainer's flags, one per line of the worker script
    assert "  --workdir=gs://b/r \\\n  --allow_version_change \\\n" in _dry_run(capsys, *run)
