"""`launch setup/run` and uncommitted work: `git archive HEAD` would leave it behind, so a
dirty tree is refused in one line naming the files, unless --allow-dirty (then a warning)."""

import subprocess

import pytest

from xlnet_jax.launch import pod

RUN = ["run", "--name", "xl", "--zone", "us-east5-a", "--accelerator-type", "v5litepod-8",
       "--config", "configs/large.py", "--workdir", "gs://b/run", "--dry-run"]  # fmt: skip


@pytest.fixture
def checkout(tmp_path):
    """A git checkout with one commit, then an edited config and a new, uncommitted one."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "large.py").write_text("A = 1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    assert pod.uncommitted_files(str(tmp_path)) == []
    (tmp_path / "configs" / "large.py").write_text("A = 2\n")
    (tmp_path / "configs" / "mine.py").write_text("B = 1\n")
    return tmp_path


def test_run_dry_run_refuses_a_dirty_tree_naming_its_files(checkout, capsys):
    assert pod.main([*RUN, "--source", str(checkout)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # not one command printed
    (line,) = captured.err.splitlines()
    assert line.startswith("xlnet-jax launch run: error: ")
    assert "configs/large.py, configs/mine.py" in line and "--allow-dirty" in line


def test_allow_dirty_ships_head_with_a_warning(checkout, capsys):
    assert pod.main([*RUN, "--source", str(checkout), "--allow-dirty"]) == 0
    captured = capsys.readouterr()
    assert f"git -C {checkout} archive" in captured.out
    assert captured.err.startswith("warning: shipping HEAD") and "configs/mine.py" in captured.err


def test_setup_refuses_too_and_run_help_says_what_is_shipped(checkout, capsys):
    setup = ["setup", "--name", "xl", "--zone", "us-east5-a", "--source", str(checkout)]
    assert pod.main([*setup, "--dry-run"]) == 1
    assert "xlnet-jax launch setup: error: " in capsys.readouterr().err
    assert pod.main(["run", "--help"]) == 0
    assert "What is shipped: the committed tree" in " ".join(capsys.readouterr().out.split())
