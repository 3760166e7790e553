"""The one retry policy (paths.retry, and each gcsfs request) and the startup checks that use
it, through the fault proxy. The policy's delays are cut short here, so the faults reach our
layer in seconds; every wait is bounded."""

import subprocess
import sys
import time

import gcsfs
import pytest
from gcsfs.retry import HttpError

from tests import gcs_emulator, gcs_faults, train_config
from tests import train_harness as harness
from tests.gcs_faults import Fault
from xlnet_jax import paths
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.errors import STORAGE_EXIT_CODE, ConfigError, DataError, StorageError
from xlnet_jax.run.workdir import prepare_workdir
from xlnet_jax.training import run_config

BUCKET = "xlnet-test-retry"
ROOT = f"gs://{BUCKET}"


@pytest.fixture(scope="module")
def proxy():
    retry = "first_delay_s=0.05,max_delay_s=0.2,budget_s=15"
    with gcs_faults.faulty_storage(seed=5, retry=retry, bucket=BUCKET) as proxy:
        yield proxy


pytestmark = pytest.mark.usefixtures("fresh_proxy")


def test_the_delay_grows_with_jitter_and_is_capped():
    policy = paths.RetryPolicy(first_delay_s=1.0, max_delay_s=8.0)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)):
        delays = {policy.delay(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(delays) > 1


def test_the_policy_reads_its_overrides(monkeypatch):
    monkeypatch.setenv(paths.RETRY_ENV, "attempts=3, budget_s=2.5")
    assert paths.retry_policy() == paths.RetryPolicy(attempts=3, budget_s=2.5)
    monkeypatch.setenv(paths.RETRY_ENV, "tries=3")
    with pytest.raises(ConfigError, match="unknown field 'tries'"):
        paths.retry_policy()


@pytest.mark.parametrize(
    "error, transient",
    [
        (HttpError({"code": 503}), True),
        (HttpError({"code": 429}), True),
        (HttpError({"code": 500}), True),
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (HttpError({"code": 400}), False),
        (OSError("Forbidden: gs://b/o"), False),  # gcsfs's 403
        (FileNotFoundError("gs://b/o"), False),  # 404
        (FileExistsError("gs://b/o"), False),  # 412
        (ValueError("bad"), False),
    ],
)
def test_what_is_transient(error, transient):
    assert paths.is_transient(error) is transient


def test_an_answer_is_never_retried():
    calls = []

    def forbidden():
        calls.append(1)
        raise FileExistsError("412")

    with pytest.raises(FileExistsError):
        paths.retry(forbidden, "writing", policy=paths.RetryPolicy(first_delay_s=0.01))
    assert len(calls) == 1


def test_retries_stop_at_the_attempt_bound_and_at_the_time_bound():
    calls = []

    def failing():
        calls.append(time.monotonic())
        raise ConnectionResetError("reset")

    with pytest.raises(StorageError, match="failed 4 time.*while probing X .*ConnectionResetError"):
        paths.retry(failing, "probing X", policy=paths.RetryPolicy(attempts=4, first_delay_s=0.01))
    assert len(calls) == 4
    calls.clear()
    start = time.monotonic()
    with pytest.raises(StorageError):
        paths.retry(failing, "x", policy=paths.RetryPolicy(first_delay_s=0.05, budget_s=0.5))
    # No sleep starts past the budget; 2 s of slack for a loaded machine's scheduling.
    assert time.monotonic() - start < 0.5 + 2 and len(calls) >= 3


def test_each_gcsfs_request_retries_under_the_policy(proxy, monkeypatch):
    fs = gcsfs.GCSFileSystem()
    fs.pipe_file(f"{BUCKET}/policy", b"p")
    proxy.add(Fault("status", status=503, classes=("read",), times=2))
    assert fs.cat_file(f"{BUCKET}/policy") == b"p"  # the third try answers
    monkeypatch.setenv(paths.RETRY_ENV, "attempts=3,first_delay_s=0.05,max_delay_s=0.1")
    proxy.add(Fault("status", status=503, classes=("read",)))
    reads = proxy.requests["read"]
    with pytest.raises(HttpError, match="503"):
        fs.cat_file(f"{BUCKET}/policy")
    assert proxy.requests["read"] - reads == 3  # the policy's attempts, not gcsfs's 6
    proxy.clear()
    reads = proxy.requests["read"]
    with pytest.raises(FileNotFoundError):  # an answer: asked once
        fs.cat_file(f"{BUCKET}/missing")
    assert proxy.requests["read"] - reads == 1


def test_a_request_inside_an_operation_stops_retrying_at_the_operation_deadline(proxy, monkeypatch):
    # The lease renews by a deadline well inside its TTL: gcsfs's request retries (which
    # run in its own event-loop thread) must stop there, not at the policy's budget.
    fs = gcsfs.GCSFileSystem()
    monkeypatch.setenv(paths.RETRY_ENV, "attempts=1000,first_delay_s=0.05,max_delay_s=0.1")
    proxy.add(Fault("status", status=503, classes=("read",)))
    start = time.monotonic()
    with pytest.raises(StorageError, match="while reading"):
        paths.retry(lambda: fs.cat_file(f"{BUCKET}/deadline"), "reading", deadline=start + 1)
    assert time.monotonic() - start < 4  # the 300 s budget would hold it for minutes
    assert proxy.injected("503", "read") >= 3


def test_a_stalled_gcsfs_request_is_cut_at_its_timeout_and_retried(proxy, monkeypatch):
    fs = gcsfs.GCSFileSystem()
    fs.pipe_file(f"{BUCKET}/stalled", b"s")
    monkeypatch.setenv(paths.RETRY_ENV, "first_delay_s=0.05,request_timeout_s=1")
    proxy.add(Fault("stall", stall_s=6, classes=("read",), times=1))
    start = time.monotonic()
    assert fs.cat_file(f"{BUCKET}/stalled") == b"s"
    assert time.monotonic() - start < 5  # 1 s, then the retry; 6 s without the bound
    assert proxy.injected("stall", "read") == 1


def test_startup_checks_retry_transient_faults(proxy):
    workdir, corpus = f"{ROOT}/startup/run", f"{ROOT}/startup/corpus"
    for fault in (
        Fault("status", status=503, times=2),
        Fault("status", status=429, retry_after=0.1, times=1),
        Fault("reset", times=2),
    ):
        proxy.add(fault)
    lock = prepare_workdir(workdir, 0)  # the writability probe and the lease
    lock.release()
    config = train_config.get_config()
    run_config.save(workdir, config)
    assert run_config.load(workdir).to_dict() == config.to_dict()
    assert run_config.newest_step(workdir) is None
    paths.write_bytes_atomic(paths.as_path(corpus) / "manifest.json", b'{"format_version": -1}')
    with pytest.raises(DataError, match="corpus format -1"):
        load_manifest(corpus)  # read in spite of the faults: the content is what fails it
    assert proxy.injected() == 5, proxy.counts


def test_a_startup_check_that_outlasts_the_budget_says_storage_failed(proxy, monkeypatch):
    monkeypatch.setenv(paths.RETRY_ENV, "first_delay_s=0.05,max_delay_s=0.1,budget_s=0.5")
    proxy.outage(5)
    with pytest.raises(StorageError, match="while (checking|probing that) .*injected, 503"):
        prepare_workdir(f"{ROOT}/startup/out", 0)
    assert proxy.injected("outage") >= 2


def test_the_cli_exits_with_the_storage_code_when_storage_outlasts_the_budget(proxy):
    proxy.outage(60)
    try:
        env = harness.environment(
            **gcs_emulator.environment(proxy.url),
            **{paths.RETRY_ENV: "first_delay_s=0.05,max_delay_s=0.1,budget_s=1"},
        )
        result = subprocess.run(
            [sys.executable, "-m", "xlnet_jax.cli", "eval", "--config", harness.CONFIG,
             "--workdir", f"{ROOT}/cli-down", "--num_cpu_devices=1"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        proxy.clear()
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == STORAGE_EXIT_CODE, result.stderr[-3000:]
    assert last.startswith("xlnet-jax eval: error: Object storage failed"), last
