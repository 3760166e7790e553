"""`prepare --beam_runner DirectRunner --num_workers 2 --out gs://`: Beam's workers, which
share no disk with the driver, write the shards to object storage themselves.

Storage is the local GCS emulator behind the fault proxy (tests/gcs_faults.py). Each SDK
worker process starts through a wrapper (`_isolating_python`) in a mount namespace of its
own: an empty tmpfs covers the driver's temporary directory, and the worker gets a temporary
root of its own, so a shortcut through the driver's disk fails these tests.
"""

import glob
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from test_data_beam import damaged_inputs
from test_data_common import scratch, small_corpus

from tests import gcs_emulator, gcs_faults
from tests.gcs_faults import Fault
from xlnet_jax import cli, paths
from xlnet_jax.data import corpus, shard_writer, staging
from xlnet_jax.data.prepare import load_manifest, prepare_corpus

BUCKET = "xlnet-prepare-beam"
SHARDS = 3  # per split: small, but more than one, so ranks cross shard boundaries
MARK = "driver-only"  # a file in the driver's temporary directory that no worker may see


@pytest.fixture(scope="module")
def proxy():
    with (
        pytest.MonkeyPatch.context() as patch,
        gcs_faults.running(bucket=BUCKET) as proxy,
        gcs_emulator.pointed_at(proxy.url),
    ):
        patch.setenv(paths.RETRY_ENV, "first_delay_s=0.05,max_delay_s=0.5,budget_s=60")
        patch.setenv(paths.CACHE_ENV, scratch("stage-cache"))
        yield proxy


@pytest.fixture(scope="module")
def reference():
    """The inputs, the tokenizer and the local one-process corpus of them."""
    inputs, model = damaged_inputs(), load_manifest(small_corpus()).tokenizer_path
    local = prepare_corpus(
        [inputs], scratch("local"), spm_model=model, validation_fraction=0.1, seed=3,
        num_workers=1, num_shards=SHARDS,
    )  # fmt: skip
    return inputs, model, local


@pytest.fixture
def isolated_workers(monkeypatch):
    """The driver's temporary directory (with MARK in it) and the folder where each
    worker the wrapper starts makes its own temporary root."""
    if (
        shutil.which("unshare") is None
        or subprocess.run([*_unshare(), "true"], capture_output=True).returncode
    ):
        pytest.skip("needs unshare(1) with mount namespaces (root or user namespaces)")
    driver_tmp, workers = scratch("driver-tmp"), scratch("worker-roots")
    open(os.path.join(driver_tmp, MARK), "w").close()
    monkeypatch.setattr(tempfile, "tempdir", driver_tmp)
    monkeypatch.setattr(sys, "executable", _isolating_python(driver_tmp, workers))
    return driver_tmp, workers


def _unshare() -> list[str]:
    return ["unshare", "--mount", "--propagation", "private"] + (
        [] if os.geteuid() == 0 else ["--map-root-user"]
    )


def _isolating_python(driver_tmp: str, workers: str) -> str:
    """A stand-in for sys.executable, with which Beam's FnApiRunner starts its SDK workers:
    it runs the real interpreter in a new mount namespace where driver_tmp is an empty
    tmpfs (it exits 98 if MARK is still visible), with TMPDIR a fresh folder of workers/."""
    script = os.path.join(scratch("wrapper"), "python")
    with open(script, "w") as f:
        f.write(
            "#!/bin/sh\n"
            f'root=$(mktemp -d "{workers}/worker-XXXXXX")\n'
            f"exec {' '.join(_unshare())} sh -c '"
            'mount -t tmpfs hidden "$1" || exit 97; [ ! -e "$1/' + MARK + '" ] || exit 98; '
            'TMPDIR="$2"; export TMPDIR; shift 2; exec "$@"'
            f'\' sh "{driver_tmp}" "$root" "{sys.executable}" "$@"\n'
        )
    os.chmod(script, os.stat(script).st_mode | stat.S_IXUSR)
    return script


def _objects(prefix: str) -> set[str]:
    return set(shard_writer.list_files(f"gs://{BUCKET}/{prefix}"))


def _assert_equal_corpora(url: str, local) -> None:
    """Same files byte for byte (the manifest's hashes) and the same token streams."""
    remote = load_manifest(url)
    assert remote.files == local.files and remote.splits == local.splits
    assert sum(".array_record-" in f for f in remote.files) == 2 * SHARDS
    staged = staging.stage_corpus(remote)
    for split in ("train", "validation"):
        got, want = corpus.load_split(staged, split), corpus.load_split(local, split)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.sentence_starts, want.sentence_starts)
    # Nothing else in the bucket: no temporary objects, no workers' report folder.
    expected = {"manifest.json", "spm.model", *remote.files}
    assert _objects(url.split("/", 3)[3]) == expected


def test_cli_two_workers_without_the_drivers_disk_write_the_local_corpus(
    proxy, reference, isolated_workers, caplog, capfd
):
    inputs, model, local = reference
    driver_tmp, workers = isolated_workers
    url = f"gs://{BUCKET}/cli"
    caplog.set_level(logging.INFO)
    code = cli.main(
        ["prepare", "--beam_runner", "DirectRunner", "--num_workers", "2", "--spm_model", model,
         "--out", url, "--validation_fraction", "0.1", "--seed", "3",
         "--num_shards", str(SHARDS), inputs]
    )  # fmt: skip
    assert code == 0
    assert os.listdir(driver_tmp) == [MARK]  # the driver's scratch is gone
    assert len(os.listdir(workers)) >= 2  # two SDK worker processes, each isolated
    _assert_equal_corpora(url, local)
    err = capfd.readouterr().err
    assert f"Prepared {url}:" in err and driver_tmp not in err
    assert f"Shards: {SHARDS} train, {SHARDS} validation." in err
    assert f"up to {SHARDS} host(s)" in err
    # Each damaged-input warning once, from the worker; not again as the runner's dump.
    assert err.count("part-0.txt: skipped 1 line(s) that are not valid UTF-8") == 1
    assert "severity: WARN" not in err
    everything = (err + caplog.text).lower()
    assert "prism" not in everything


def test_a_failed_upload_of_each_shard_is_retried_and_leaves_nothing(
    fresh_proxy, reference, isolated_workers
):
    """Inputs on gs:// too, as on Dataflow. Each shard's first upload is cut after the
    emulator stored it (the worker sees a reset connection): the writer uploads again, and
    the stray first copy is removed."""
    local_inputs, model, local = reference
    for path in glob.glob(local_inputs):
        data = open(path, "rb").read()
        (paths.as_path(f"gs://{BUCKET}/text") / os.path.basename(path)).write_bytes(data)
    inputs = f"gs://{BUCKET}/text/part-*.txt"
    names = [os.path.basename(f) for f in local.files if ".array_record-" in f]
    for name in names:
        fresh_proxy.add(Fault("reset", classes=("write", "chunk"), times=1, match=name + ".tmp-"))
    url = f"gs://{BUCKET}/faults"
    prepare_corpus(
        [inputs], url, spm_model=model, validation_fraction=0.1, seed=3, num_shards=SHARDS,
        beam_options=["--runner=DirectRunner", "--direct_num_workers=2",
                      "--direct_running_mode=multi_processing"],
    )  # fmt: skip
    assert fresh_proxy.injected("reset") == len(names) == 2 * SHARDS
    remote = load_manifest(url)
    assert [i["sha256"] for i in remote.inputs] == [i["sha256"] for i in local.inputs]
    assert remote.inputs[0]["path"] == f"gs://{BUCKET}/text/part-0.txt"
    _assert_equal_corpora(url, local)
