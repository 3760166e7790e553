"""The pod workflow on gs:// through the CLI and the fault proxy (tests/gcs_faults.py):
prepare -> train -> SIGKILL -> resume -> eval -> export-hf -> --init_from sources, with ~5%
transient faults on every request class and a 12-second outage that starts inside a
checkpoint save while training goes on. The losses and the exported params equal the
fault-free local run's bit for bit; the proxy's counters show the faults happened; no step
is left half-written as complete. The verdict reads the emulator over its JSON API, not
through this process's gcsfs filesystem."""

import signal
import subprocess
import sys
import tempfile
import time

from tests import gcs_emulator, gcs_faults, test_data_common, train_config
from tests import train_harness as harness
from tests.gcs_faults import Fault
from xlnet_jax import paths
from xlnet_jax.checkpoint import hf
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.data import staging
from xlnet_jax.data.manifest import load_manifest, manifest_fingerprint
from xlnet_jax.run.init_from import check_source, load_source
from xlnet_jax.training.metrics import read_metrics

BUCKET = "xlnet-test-e2e"  # this module's own: nothing it reads was left by another
ROOT = f"gs://{BUCKET}"
TRANSIENT = (  # about 5% of the requests of every class
    Fault("status", status=503, probability=0.02),
    Fault("status", status=429, retry_after=1, probability=0.01),
    Fault("status", status=500, probability=0.01),
    Fault("reset", probability=0.01, classes=("read", "list", "metadata")),
    Fault("status", status=503, after_upstream=True, probability=0.01, classes=("write",)),
)
SAVE_EVERY = "--config.checkpoint_every=3"
OUTAGE_S = 12
# The retry policy of every process: delays cut short, so a run goes on within about 2 s of
# the storage's return, and attempts raised, so retries outlast the outage (over 30 s).
RETRY = "first_delay_s=0.25,max_delay_s=2,attempts=40"
# The longest one command may take: on this 2-core machine under other tests' load, the
# first compile of the train step alone took over 3 minutes.
COMMAND_S = 900


def _cli(gcs_url, cwd, *args, slow: float = 0.0):
    """Starts `xlnet-jax ARGS` against storage at `gcs_url`, in `cwd`, its cache under
    cwd/cache.

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
    process.wait(timeout=COMMAND_S)
    output = _output(process)
    assert process.returncode == 0, output[-3000:]
    return output


def _train(workdir: str, corpus: str) -> list[str]:
    return [
        "train", "--config", harness.CONFIG, "--workdir", workdir,
        "--num_cpu_devices=1", f"--config.corpus_dir={corpus}", SAVE_EVERY,
    ]  # fmt: skip


def _export_reference(tmp_path) -> str:
    out = tmp_path / "reference-hf"
    from xlnet_jax.checkpoint.export import export_to_hf

    export_to_hf(str(harness.reference_run()), str(out))
    return str(out)


def _committed_steps(emulator: str) -> set[str]:
    """The steps whose commit marker is in the emulator (asked directly, past the proxy)."""
    names = gcs_emulator.list_objects(emulator, BUCKET, "run/checkpoints/")
    return {
        n.split("/")[2] for n in names if n.endswith("/commit_success.txt") and n.count("/") == 3
    }


def test_the_pod_workflow_under_faults_equals_the_local_run(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RETRY_ENV, RETRY)
    corpus, workdir, export = f"{ROOT}/corpus", f"{ROOT}/run", f"{ROOT}/hf"
    with gcs_faults.running(seed=2024, bucket=BUCKET) as proxy, gcs_emulator.pointed_at(proxy.url):
        for fault in TRANSIENT:
            proxy.add(fault)
        _ok(
            _cli(proxy.url, tmp_path, "prepare", "--out", corpus, "--vocab_size=500",
                 "--validation_fraction=0.1", "--num_workers=1", test_data_common.english_text())
        )  # fmt: skip
        run = _cli(proxy.url, tmp_path, *_train(workdir, corpus), slow=0.5)
        deadline = time.time() + COMMAND_S
        while "6" not in _committed_steps(proxy.upstream):
            assert run.poll() is None and time.time() < deadline, _output(run)[-3000:]
            time.sleep(0.1)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
        # The resumed run's save of step 9 starts the outage; steps 10-12 train on.
        outage = proxy.add(
            Fault("outage", outage_s=OUTAGE_S, times=1, classes=("write", "chunk"),
                  match="run/checkpoints/9")
        )  # fmt: skip
        started = time.monotonic()
        resumed = _ok(_cli(proxy.url, tmp_path, *_train(workdir, corpus)))
        assert "Resumed from step 6" in resumed, resumed[-3000:]
        assert outage.times == 0 and time.monotonic() - started > OUTAGE_S  # it ran through it
        evaluated = _ok(
            _cli(proxy.url, tmp_path, "eval", "--config", harness.CONFIG, "--workdir", workdir,
                 "--num_cpu_devices=1", f"--config.corpus_dir={corpus}")
        )  # fmt: skip
        exported = _ok(_cli(proxy.url, tmp_path, "export-hf", workdir, "--out", export))
        proxy.clear()  # the checks below read what the runs left
        counts, failed_preconditions = dict(proxy.counts), proxy.preconditions_failed

        # The same input and options as the local corpus of the reference run: the same corpus.
        local = load_manifest(harness.corpus_dir())
        assert manifest_fingerprint(load_manifest(corpus)) == manifest_fingerprint(local)
        # The tokenizer and the dataset's metadata are staged by the killed run already; the
        # shards are not needed again, its cache of the train split is there.
        small = len([f for f in local.files if not staging.SHARD.search(f)]) + 1
        assert f"0 of {small} files downloaded" in resumed and resumed.count("downloaded") == 1
        final = gcs_emulator.download(proxy.upstream, BUCKET, "run/", tmp_path / "final-run")
        want = {step: r["loss"] for step, r in read_metrics(str(harness.reference_run())).items()}
        got = {step: r["loss"] for step, r in read_metrics(str(final)).items()}
        assert got == want  # all 12 steps, bit for bit
        assert "at step 12 on the validation split of gs://" in evaluated, evaluated[-2000:]
        assert "held-out PLM loss" in evaluated
        assert read_metrics(str(final), kind="eval")[12]["loss"] > 0
        assert "spiece.model" in exported
        exported = gcs_emulator.download(proxy.upstream, BUCKET, "hf/", tmp_path / "final-hf")
        assert (exported / "spiece.model").is_file()
        _, params = hf.load_hf(str(exported))
        _, reference = hf.load_hf(_export_reference(tmp_path))
        harness.assert_trees_equal(params, reference)
        complete = _committed_steps(proxy.upstream)
        # The save under the outage completed, or failed in one line and training went on.
        saved_9 = "9" in complete
        assert saved_9 or resumed.count("save of step 9 failed") == 1, resumed[-3000:]
        # No half-written step reads as complete: orbax lists only the committed ones.
        reader = Checkpointer(workdir, train_config.get_config())
        listed = {str(step) for step in reader.steps()}
        reader.close()
        assert "12" in complete and listed <= complete, (listed, complete)

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
    injected = sum(counts.values())
    assert counts.get("outage:write", 0) + counts.get("outage:chunk", 0) >= 1, counts
    classes = {key.split(":")[1] for key in counts if not key.startswith("outage")}
    assert {"read", "write", "metadata"} <= classes and injected >= 20, counts
    print(f"faults injected: {injected} {counts}; writes refused on a precondition (412): "
          f"{failed_preconditions}")  # fmt: skip
