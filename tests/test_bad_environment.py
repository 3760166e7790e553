"""An unusable workdir stops training before it starts, in one line naming the workdir.

Unwritable: a workdir below a regular file fails for every user, root included (these tests
may run as root, which ignores permission bits, so the chmod case runs only as non-root).
Full: shutil.disk_usage is faked, since filling a real disk is neither quick nor polite.
Busy: a second real run on a workdir that a running one holds is refused.
"""

import collections
import os

import pytest

from tests import train_harness as harness
from tests.train_config import get_config
from xlnet_jax.errors import CheckpointError
from xlnet_jax.run import workdir as workdir_lib
from xlnet_jax.training import evaluate, train

DiskUsage = collections.namedtuple("DiskUsage", "total used free")


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if "xlnet-jax train: error:" in line]


def test_workdir_below_a_file_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(workdir_lib.WorkdirError, match=r"a-file/run is not writable \(Not a dir"):
        workdir_lib.prepare_workdir(str(blocker / "run"), checkpoint_bytes=0)


def test_workdir_that_is_a_file_is_named_as_such(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(workdir_lib.WorkdirError, match=r"a-file is a file, not a directory; pick"):
        workdir_lib.prepare_workdir(str(blocker), checkpoint_bytes=0)


def test_eval_of_an_empty_workdir_creates_nothing_in_it(tmp_path):
    config = get_config()
    config.corpus_dir = harness.corpus_dir()
    with pytest.raises(CheckpointError, match=r"has no checkpoint to evaluate; train first"):
        evaluate.evaluate_workdir(config, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_workdir_is_refused(tmp_path):
    workdir = tmp_path / "read-only"
    workdir.mkdir()
    workdir.chmod(0o500)
    try:
        with pytest.raises(workdir_lib.WorkdirError, match="is not writable"):
            workdir_lib.prepare_workdir(str(workdir), checkpoint_bytes=0)
    finally:
        workdir.chmod(0o700)


def test_cli_unwritable_workdir_fails_before_training_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = harness.run_to_failure(blocker / "run", timeout=200)
    assert result.returncode == 1, result.stderr[-3000:]
    errors = error_lines(result)
    assert len(errors) == 1 and f"Workdir {blocker / 'run'} is not writable" in errors[0]
    assert "Traceback" not in result.stderr and "Compiled" not in result.stderr


def fake_free_space(monkeypatch, free_bytes: int) -> None:
    monkeypatch.setattr(
        workdir_lib.shutil, "disk_usage", lambda path: DiskUsage(10 * free_bytes, 0, free_bytes)
    )


def test_full_disk_stops_train_before_it_starts(tmp_path, monkeypatch):
    """The whole train entry point, in-process: it stops before writing anything."""
    config = get_config()
    config.corpus_dir = harness.corpus_dir()
    fake_free_space(monkeypatch, 2**20)
    with pytest.raises(workdir_lib.WorkdirError) as info:
        train.train_and_evaluate(config, str(tmp_path / "run"))
    message = str(info.value)
    assert "\n" not in message
    assert f"Workdir {tmp_path / 'run'} has 1 MiB free but needs" in message
    assert "before training starts" in message
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []


def test_full_disk_before_a_save_names_the_step(tmp_path, monkeypatch):
    """The loop checks before every save, so the newest checkpoint stays intact."""
    fake_free_space(monkeypatch, 10 * 2**20)
    with pytest.raises(workdir_lib.WorkdirError, match="before saving step 12.*resumes from"):
        workdir_lib.check_free_space(str(tmp_path), 100 * 2**20, "saving step 12")
    workdir_lib.check_free_space(str(tmp_path), 5 * 2**20, "saving step 12")


def test_second_run_on_a_busy_workdir_is_refused(tmp_path):
    workdir = tmp_path / "run"
    first = harness.start(workdir, step_delay=2.0)
    try:
        harness.wait_for(lambda: 1 in harness.losses(workdir), first, workdir)
        second = harness.run_to_failure(workdir, timeout=200)
        assert second.returncode == 1, second.stderr[-3000:]
        errors = error_lines(second)
        assert len(errors) == 1, second.stderr[-3000:]
        assert "Another run is training in this workdir (lock" in errors[0]
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first run is untouched and still training
    finally:
        harness.kill(first)
