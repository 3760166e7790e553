"""The metrics mirror of a gs:// workdir under storage faults, through the fault proxy: a
write never waits on storage, a failed upload is retried from the mirror, nothing is
dropped; when storage stays down past the budget, close() says so and keeps the mirror."""

import logging
import time

import pytest

from tests import gcs_emulator, gcs_faults
from xlnet_jax import paths
from xlnet_jax.training.metrics import MetricsWriter, read_metrics

ROOT = f"gs://{gcs_emulator.BUCKET}"


@pytest.fixture(scope="module")
def proxy():
    # Two tries per request: an outage of seconds outlasts them and reaches the mirror.
    retry = "attempts=2,first_delay_s=0.1,max_delay_s=0.5,budget_s=30"
    with gcs_faults.faulty_storage(seed=13, retry=retry) as proxy:
        yield proxy


def _remote_steps(workdir: str) -> set[int]:
    try:
        return set(read_metrics(workdir))
    except Exception:  # noqa: BLE001 - not there yet, or storage still out
        return set()


def test_uploads_that_fail_are_retried_from_the_mirror_and_never_block(proxy, caplog):
    workdir = f"{ROOT}/metrics-outage"
    writer = MetricsWriter(workdir)
    writer.write(1, {"loss": 1.0})
    proxy.outage(3)
    with caplog.at_level(logging.WARNING, logger="xlnet_jax"):
        for step in range(2, 7):
            start = time.monotonic()
            writer.write(step, {"loss": float(step)})
            assert time.monotonic() - start < 0.5  # training does not wait on storage
        deadline = time.monotonic() + 60
        while _remote_steps(workdir) != set(range(1, 7)):
            assert time.monotonic() < deadline, "the mirror was never uploaded after the outage"
            time.sleep(0.2)
    assert proxy.injected("outage", "write") > 0
    assert sum("Could not upload the metrics" in r.getMessage() for r in caplog.records) == 1
    writer.close()
    assert [r["loss"] for r in read_metrics(workdir).values()] == [1.0, 2, 3, 4, 5, 6]
    assert (paths.as_path(workdir) / "tensorboard" / "train").is_dir()


def test_close_keeps_the_mirror_when_storage_stays_down(proxy, monkeypatch, caplog):
    monkeypatch.setenv(paths.RETRY_ENV, "first_delay_s=0.1,max_delay_s=0.2,budget_s=0.5")
    writer = MetricsWriter(f"{ROOT}/metrics-down")
    writer.write(1, {"loss": 1.0})
    proxy.outage(60)
    try:
        with caplog.at_level(logging.ERROR, logger="xlnet_jax"):
            start = time.monotonic()
            writer.close()
        assert time.monotonic() - start < 5  # the budget of 0.5 s, plus one call's timeout
    finally:
        proxy.clear()
    (line,) = [r.getMessage() for r in caplog.records if "metrics stay in" in r.getMessage()]
    mirror = writer._root
    assert str(mirror) in line and (mirror / "metrics.jsonl").read_text().count("\n") == 1


def test_sync_waits_out_a_failed_upload_so_a_checkpoint_never_outruns_its_metrics(proxy):
    # The training loop syncs before each checkpoint save: a kill after the save must not
    # lose records the resumed run will not log again.
    workdir = f"{ROOT}/metrics-sync"
    writer = MetricsWriter(workdir)
    proxy.add(gcs_faults.Fault("status", status=503, classes=("write", "chunk"), times=2))
    writer.write(1, {"loss": 1.0})
    writer.write(2, {"loss": 2.0})
    start = time.monotonic()
    writer.sync()
    assert time.monotonic() - start < 30  # well inside metrics_wait_s (60 s)
    assert proxy.injected("503") == 2
    assert _remote_steps(workdir) == {1, 2}  # before close: the mirror's thread did it
    writer.close()


def test_sync_gives_up_after_metrics_wait_s_in_one_line(proxy, monkeypatch, caplog):
    monkeypatch.setenv(paths.RETRY_ENV, "attempts=2,first_delay_s=0.1")
    writer = MetricsWriter(f"{ROOT}/metrics-sync-down", sync_wait_s=0.5)
    proxy.outage(20)
    try:
        writer.write(1, {"loss": 1.0})
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="xlnet_jax"):
            writer.sync()
        assert time.monotonic() - start < 3  # 0.5 s, plus a loaded machine's scheduling
    finally:
        proxy.clear()
    assert any("not uploaded to" in r.getMessage() for r in caplog.records)
    writer.close()  # storage answers again: the mirror's records get there
    assert _remote_steps(f"{ROOT}/metrics-sync-down") == {1}
