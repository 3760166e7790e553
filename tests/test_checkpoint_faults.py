"""Checkpoint saves on gs:// under storage faults, through the fault proxy (transient
faults: the end-to-end test, tests/test_gcs_faults_e2e.py). A save under an outage fails
in one line, training goes on, the failed step is never complete; failed saves in a row
stop the run naming the newest complete step; a save that stalls is given up after
config.save_wait_s. The retry policy (gcsfs and tensorstore follow it) and the save's
bound are cut short here, so that each test takes seconds; every wait is bounded."""

import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import gcs_emulator, gcs_faults, train_config
from tests import train_harness as harness
from tests.gcs_faults import Fault
from xlnet_jax import paths
from xlnet_jax.checkpoint import checkpointer as checkpointer_module
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.errors import SavesFailedError

ROOT = f"gs://{gcs_emulator.BUCKET}"
FAST = "attempts=2,first_delay_s=0.05,max_delay_s=0.1,budget_s=2"


@pytest.fixture(scope="module")
def proxy():
    with gcs_faults.faulty_storage(seed=11, retry=FAST) as proxy:
        checkpointer_module._configure_tensorstore_retries(paths.retry_policy())
        yield proxy
    checkpointer_module._configure_tensorstore_retries(paths.RetryPolicy())


pytestmark = pytest.mark.usefixtures("fresh_proxy")


CONFIG = train_config.get_config()
CONFIG.save_wait_s = 20.0


def _state(step: int) -> TrainState:
    key = jax.random.key(step)
    return TrainState(
        step=jnp.int32(step),
        params={"w": jax.random.normal(key, (64, 32)), "b": jnp.arange(32.0)},
        opt_state={"mu": jnp.full((64, 32), step, jnp.float32)},
        mems=jnp.zeros((CONFIG.n_layer, CONFIG.batch_size, CONFIG.mem_len, CONFIG.d_model)),
        rng=jax.random.key_data(key),
        skipped_steps=jnp.int32(0),
    )


def _save(checkpointer: Checkpointer, step: int) -> bool:
    return checkpointer.save(_state(step), make_meta(CONFIG, "fingerprint", step))


def _settled(checkpointer: Checkpointer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while checkpointer._in_flight is not None:
        assert time.monotonic() < deadline, "the save neither completed nor failed"
        checkpointer.poll()
        time.sleep(0.05)


def _restored(workdir: str) -> TrainState:
    reader = Checkpointer(workdir, CONFIG)
    try:
        return reader.restore(_state(0), CONFIG, "fingerprint", move_damaged=False)
    finally:
        reader.close()


def test_the_tensorstore_contexts_carry_the_retry_policy(proxy):
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    spec = ts_utils.get_ts_context(use_ocdbt=True).spec.to_json()
    assert spec["gcs_request_retries"]["max_retries"] == 2


def test_a_save_under_an_outage_fails_in_one_line_and_the_next_one_succeeds(proxy, caplog):
    workdir = f"{ROOT}/ckpt-outage"
    checkpointer = Checkpointer(workdir, CONFIG)
    assert _save(checkpointer, 2)
    _settled(checkpointer)
    proxy.outage(4)
    with caplog.at_level(logging.ERROR, logger="xlnet_jax"):
        _save(checkpointer, 4)  # its start or its async write fails
        _settled(checkpointer)
    failed = [r.getMessage() for r in caplog.records if "save of step 4 failed" in r.getMessage()]
    assert len(failed) == 1 and "training goes on" in failed[0] and "step 2" in failed[0]
    assert 4 not in checkpointer.steps()
    deadline = time.monotonic() + 20
    while proxy.in_outage():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _save(checkpointer, 6)
    checkpointer.close()
    assert checkpointer.newest_complete == 6
    reader = Checkpointer(workdir, CONFIG)
    assert reader.steps() == [2, 6]  # the failed step 4 never reads as complete
    reader.close()
    harness.assert_trees_equal(_restored(workdir), _state(6))
    assert proxy.injected("outage") > 0


def test_failed_saves_in_a_row_stop_the_run_naming_the_newest_complete_step(proxy):
    checkpointer = Checkpointer(f"{ROOT}/ckpt-give-up", CONFIG)
    assert _save(checkpointer, 1)
    _settled(checkpointer)
    proxy.add(Fault("status", status=503, classes=("write", "chunk")))
    # A StorageError, so the CLI exits with STORAGE_EXIT_CODE and `launch run` trains again.
    with pytest.raises(SavesFailedError, match="3 save.s. in a row failed.* step 1 in gs://"):
        for step in (2, 3, 4, 5):
            _save(checkpointer, step)
            _settled(checkpointer)
    proxy.clear()


def test_a_stalled_save_is_given_up_after_its_bound(proxy, caplog):
    config = CONFIG.copy_and_resolve_references()
    config.save_wait_s = 0.5
    checkpointer = Checkpointer(f"{ROOT}/ckpt-stall", config)
    stall = Fault("stall", stall_s=10, classes=("write", "chunk"), times=1, match="ckpt-stall")
    proxy.add(stall)
    assert _save(checkpointer, 1)
    deadline = time.monotonic() + 60
    while stall.times:  # the save's write is now held by the proxy for stall_s
        assert time.monotonic() < deadline, "the save wrote nothing"
        time.sleep(0.05)
    waits = []
    with caplog.at_level(logging.ERROR, logger="xlnet_jax"):
        start = time.monotonic()
        assert not _save(checkpointer, 2)  # step 1 still writing: step 2 is not started
        waits.append(time.monotonic() - start)
    assert any("still writing after 0.5 s" in r.getMessage() for r in caplog.records)
    start = time.monotonic()
    with pytest.raises(SavesFailedError, match="still writing after 0.5 s.*gave it up"):
        checkpointer.close()
    waits.append(time.monotonic() - start)
    # The loop and the exit each waited about save_wait_s, never out the stall.
    assert max(waits) < stall.stall_s / 2, waits
    np.testing.assert_equal(proxy.injected("stall"), 1)
    checkpointer.manager.wait_until_finished()  # let the stalled write end before teardown
    checkpointer.manager.close()


def test_a_step_unreadable_for_a_storage_error_is_skipped_but_never_moved(proxy, caplog):
    workdir = f"{ROOT}/ckpt-restore"
    checkpointer = Checkpointer(workdir, CONFIG)
    for step in (2, 4):
        assert _save(checkpointer, step)
        _settled(checkpointer)
    checkpointer.close()
    proxy.add(Fault("status", status=503, classes=("read",), match="checkpoints/4/"))
    reader = Checkpointer(workdir, CONFIG)
    with caplog.at_level(logging.WARNING, logger="xlnet_jax"):
        restored = reader.restore(_state(0), CONFIG, "fingerprint")  # may move damaged steps
    reader.close()
    proxy.clear()
    harness.assert_trees_equal(restored, _state(2))
    assert proxy.injected("503", "read") > 0
    assert (paths.as_path(workdir) / "checkpoints" / "4" / "commit_success.txt").exists()
    assert not (paths.as_path(workdir) / "checkpoints_damaged").exists()
    assert any(
        "step 4" in r.getMessage() and "left in place" in r.getMessage() for r in caplog.records
    )


def test_a_save_whose_marker_is_never_written_fails_and_costs_no_good_step(proxy, caplog):
    # orbax 0.12.8 raises this failure from wait_until_finished; the step the save was to
    # replace must outlive it: with keep_checkpoints=1 it is the only good one.
    workdir = f"{ROOT}/ckpt-no-marker"
    config = CONFIG.copy_and_resolve_references()
    config.keep_checkpoints = 1
    checkpointer = Checkpointer(workdir, config)
    assert _save(checkpointer, 2)
    _settled(checkpointer)
    proxy.add(Fault("status", status=503, classes=("write", "chunk"), match="4/commit_success"))
    with caplog.at_level(logging.ERROR, logger="xlnet_jax"):
        _save(checkpointer, 4)
        _settled(checkpointer)
    proxy.clear()
    failed = [r.getMessage() for r in caplog.records if "save of step 4 failed" in r.getMessage()]
    assert len(failed) == 1 and "step 2" in failed[0], [r.getMessage() for r in caplog.records]
    assert proxy.injected("503", "write") + proxy.injected("503", "chunk") > 0
    assert checkpointer.steps() == [2]
    for step in (6, 8):
        assert _save(checkpointer, step)
        _settled(checkpointer)
    checkpointer.close()
    reader = Checkpointer(workdir, config)
    assert reader.steps() == [6, 8]  # step 2 went at the save after step 6 was complete
    reader.close()


@pytest.mark.parametrize(
    "message, storage",
    [
        ('DATA_LOSS: Error reading "state/.zarray" at local file "/tmp/p-503/d/a429b"', False),
        ("UNAVAILABLE: HTTP response code: 503 with body: injected", True),
        ("Error writing: HTTP response code: 429 with body: slow down", True),
        ("DEADLINE_EXCEEDED: request timed out", True),
    ],
)
def test_a_storage_fault_is_told_by_its_status_never_by_digits_in_a_path(message, storage):
    # A damaged local step whose path held "503" was once left in place as a network error.
    assert checkpointer_module._storage_fault(ValueError(message)) is storage
