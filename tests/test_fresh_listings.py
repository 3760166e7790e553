"""Answers about a gs:// workdir come from storage, not from a listing this process cached.

This test process is the long-lived reader: etils keeps its gcsfs filesystem for the
process's lifetime. Another process changes the workdir under it, as tensorstore, another
host or another run does, and the reader sees the change (xlnet_jax/paths/__init__.py
switches gcsfs's listing cache off).
"""

import subprocess
import sys

import pytest
from etils import epath

from tests import gcs_emulator
from tests import train_harness as harness
from xlnet_jax import paths

BUCKET = "xlnet-test-fresh"
ROOT = f"gs://{BUCKET}/run"


@pytest.fixture(scope="module")
def gcs():
    with gcs_emulator.running(BUCKET) as url, gcs_emulator.pointed_at(url):
        yield url


def _write_from_another_process(gcs_url: str, name: str, data: bytes) -> None:
    code = (
        "import sys; from tests import gcs_emulator; "
        "gcs_emulator.write_object(sys.argv[1], sys.argv[2], sys.argv[3], sys.stdin.buffer.read())"
    )
    subprocess.run(
        [sys.executable, "-c", code, gcs_url, BUCKET, name],
        input=data, cwd=harness.REPO, check=True, timeout=120,
    )  # fmt: skip


def test_etils_filesystem_keeps_no_listings(gcs):
    fs = epath.backend.fsspec_backend.fs(ROOT)  # the one that epath.Path uses for gs://
    assert fs.dircache.use_listings_cache is False
    assert fs is epath.backend.fsspec_backend.fs(ROOT)  # and it lives as long as the process


def test_a_step_committed_by_another_process_exists_for_a_long_lived_reader(gcs):
    steps = paths.as_path(f"{ROOT}/checkpoints")
    _write_from_another_process(gcs, "run/checkpoints/3/commit_success.txt", b"")
    assert [p.name for p in steps.iterdir()] == ["3"]  # the reader has listed the folder
    marker = steps / "6" / "commit_success.txt"
    assert not marker.exists()  # and looked for the next step before it was there
    _write_from_another_process(gcs, "run/checkpoints/6/commit_success.txt", b"")
    assert marker.exists()
    assert sorted(p.name for p in steps.iterdir()) == ["3", "6"]


def test_an_object_rewritten_by_another_process_is_read_whole(gcs):
    metrics = paths.as_path(f"{ROOT}/metrics.jsonl")
    _write_from_another_process(gcs, "run/metrics.jsonl", b"a" * 100)
    assert metrics.read_bytes() == b"a" * 100
    assert metrics in list(metrics.parent.iterdir())  # its size is in the folder's listing
    _write_from_another_process(gcs, "run/metrics.jsonl", b"b" * 250)
    read = metrics.read_bytes()
    assert read == b"b" * 250, f"read {len(read)} of 250 bytes"
