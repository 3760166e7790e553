"""The pod workflow on gs:// paths, through the CLI, against a local GCS (tests/gcs_emulator.py):
prepare -> train -> SIGKILL -> resume (bit-exact) -> eval -> export-hf -> --init_from sources,
and the lease."""

import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests import gcs_emulator, test_data_common, train_config
from tests import train_harness as harness
from xlnet_jax import paths
from xlnet_jax.checkpoint import hf
from xlnet_jax.data import staging
from xlnet_jax.data.manifest import load_manifest, manifest_fingerprint
from xlnet_jax.errors import WorkdirError
from xlnet_jax.run.init_from import check_source, load_source
from xlnet_jax.run.lease import ObjectLease
from xlnet_jax.training.metrics import read_metrics

ROOT = f"gs://{gcs_emulator.BUCKET}"


@pytest.fixture(scope="module")
def gcs():
    """The emulator's URL; this process's clients point at it while the module runs."""
    with gcs_emulator.running() as url, gcs_emulator.pointed_at(url):
        yield url


def _cli(gcs_url, cwd, *args, slow: float = 0.0):
    """Starts `xlnet-jax ARGS` against the emulator, in `cwd`, its cache under cwd/cache.

    Its output goes to a file, never a pipe: a pipe nobody reads while the test polls for a
    checkpoint fills up and blocks the run.
    """
    prefix = [str(harness.SLOW_STEPS), str(slow)] if slow else ["-m", "xlnet_jax.cli"]
    env = harness.environment(
        **gcs_emulator.environment(gcs_url), **{paths.CACHE_ENV: str(cwd / "cache")}
    )
    log = tempfile.NamedTemporaryFile("w+", dir=cwd, suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, *prefix, *args], env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
    )
    process.log = log
    return process


def _output(process) -> str:
    process.log.seek(0)
    return process.log.read()


def _ok(process) -> str:
    process.wait(timeout=400)
    output = _output(process)
    assert process.returncode == 0, output[-3000:]
    return output


def _train(workdir: str, corpus: str) -> list[str]:
    return [
        "train", "--config", harness.CONFIG, "--workdir", workdir,
        "--num_cpu_devices=1", f"--config.corpus_dir={corpus}",
    ]  # fmt: skip


def test_prepare_train_kill_resume_eval_export_on_gs(gcs, tmp_path):
    corpus, workdir, export = f"{ROOT}/corpus", f"{ROOT}/run", f"{ROOT}/hf"
    _ok(
        _cli(gcs, tmp_path, "prepare", "--out", corpus, "--vocab_size=500",
             "--validation_fraction=0.1", "--num_workers=1", test_data_common.english_text())
    )  # fmt: skip
    # The same input and options as the local corpus of the reference run: the same corpus.
    local = load_manifest(harness.corpus_dir())
    assert manifest_fingerprint(load_manifest(corpus)) == manifest_fingerprint(local)

    run = _cli(gcs, tmp_path, *_train(workdir, corpus), slow=0.5)
    # On object storage orbax marks a finished step with commit_success.txt (no rename).
    done = paths.as_path(workdir) / "checkpoints" / "6" / "commit_success.txt"
    deadline = time.time() + 300
    while not done.exists():
        assert run.poll() is None and time.time() < deadline, _output(run)[-3000:]
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=60)
    resumed = _ok(_cli(gcs, tmp_path, *_train(workdir, corpus)))
    assert "Resumed from step 6" in resumed, resumed[-3000:]
    # The tokenizer and the dataset's metadata are staged by the killed run already; the
    # shards are not needed again, its cache of the train split is there.
    small = len([f for f in local.files if not staging.SHARD.search(f)]) + 1
    assert f"0 of {small} files downloaded" in resumed and resumed.count("downloaded") == 1

    want = {step: r["loss"] for step, r in read_metrics(str(harness.reference_run())).items()}
    got = {step: r["loss"] for step, r in read_metrics(workdir).items()}
    assert got == want  # all 12 steps, bit for bit

    evaluated = _ok(
        _cli(gcs, tmp_path, "eval", "--config", harness.CONFIG, "--workdir", workdir,
             "--num_cpu_devices=1", f"--config.corpus_dir={corpus}")
    )  # fmt: skip
    assert "at step 12 on the validation split of gs://" in evaluated, evaluated[-2000:]
    assert "held-out PLM loss" in evaluated
    assert read_metrics(workdir, kind="eval")[12]["loss"] > 0

    exported = _ok(_cli(gcs, tmp_path, "export-hf", workdir, "--out", export))
    assert "spiece.model" in exported
    _, params = hf.load_hf(export)
    _, reference = hf.load_hf(_export_reference(tmp_path))
    harness.assert_trees_equal(params, reference)
    assert (paths.as_path(export) / "spiece.model").exists()

    # train --init_from reads each kind of source from gs://, tokenizer check included.
    imported = f"{ROOT}/imported"
    hf.import_hf(export, imported)
    config = train_config.get_config()
    config.corpus_dir = corpus
    for source, kind in (
        (export, "HF directory"),
        (imported, "params directory"),
        (workdir, "workdir"),
    ):
        got = load_source(source)
        assert got.kind == kind and got.tokenizer.startswith(ROOT)
        check_source(got, config, load_manifest(corpus))
        harness.assert_trees_equal(got.params, reference)
    assert not [p for p in tmp_path.rglob("gs:*")], "a gs:// path became a local directory"
    assert not [p for p in harness.REPO.glob("gs:*")]


def _export_reference(tmp_path) -> str:
    out = tmp_path / "reference-hf"
    from xlnet_jax.checkpoint.export import export_to_hf

    export_to_hf(str(harness.reference_run()), str(out))
    return str(out)


def test_the_lease_excludes_a_live_holder_and_passes_on(gcs):
    url = f"{ROOT}/lease-test/.lock-process-0"
    # A TTL long beside a loaded machine's scheduling delays; the test waits on a renewal,
    # not on a clock, so timing cannot fail it.
    first = ObjectLease(url, ttl=6)
    with pytest.raises(WorkdirError, match="Another run holds the workdir lease"):
        ObjectLease(url, ttl=6)  # held by this live process, renewed in the background
    generation, deadline = first._generation, time.monotonic() + 60
    while first._generation == generation:  # a renewal at ttl/3 keeps it fresh
        assert time.monotonic() < deadline and first._lost is None
        time.sleep(0.05)
    with pytest.raises(WorkdirError, match="Another run holds"):
        ObjectLease(url, ttl=6)
    first.check()
    first.release()
    second = ObjectLease(url, ttl=6)
    second.release()
    assert not paths.as_path(url).exists()


def test_a_stale_lease_is_taken_over_and_its_holder_learns_it(gcs):
    url = f"{ROOT}/lease-stale/.lock-process-0"
    stalled = ObjectLease(url, ttl=0.5)
    stalled._stop.set()  # a holder that stops renewing (a paused VM, a lost network)
    stalled._renewer.join()
    time.sleep(0.6)
    taker = ObjectLease(url, ttl=0.5)
    assert not stalled._renew()
    with pytest.raises(WorkdirError, match="was lost"):
        stalled.check()
    stalled.release()  # leaves the taker's lease alone
    assert paths.as_path(url).exists()
    taker.release()
    assert not paths.as_path(url).exists()
