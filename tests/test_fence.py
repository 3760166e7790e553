"""The fence (xlnet_jax/run/fence.py) in one process, through the fault proxy: once the
lease can no longer be counted on, a write is refused before it is sent, a write retrying
through the outage is cut at that moment (not at its retry budget), the watchdog and
check() report it in one line; the lease's own requests and reads are not fenced. At the
end of a run, a save still writing through an outage longer than the TTL keeps the fence up:
its write is cut, never landing past the lease. The kill switch ends the process whatever
its one line meets. The TTL's environment variable is checked."""

import subprocess
import sys
import threading
import time

import pytest

from tests import gcs_faults
from tests.split_storage import clients_at
from xlnet_jax import paths
from xlnet_jax.errors import STORAGE_EXIT_CODE, ConfigError, LeaseLostError, StorageError
from xlnet_jax.run import lease as lease_module
from xlnet_jax.run.fence import Fence
from xlnet_jax.run.lease import ObjectLease

BUCKET = "xlnet-fence"
ROOT = f"gs://{BUCKET}"
TTL_S = 3.0


@pytest.fixture(scope="module")
def proxy():
    retry = "first_delay_s=0.1,max_delay_s=0.5,budget_s=60"
    with (
        pytest.MonkeyPatch.context() as patch,
        gcs_faults.running(bucket=BUCKET) as proxy,
        clients_at(proxy.url),
    ):
        patch.setenv(paths.RETRY_ENV, retry)
        yield proxy


pytestmark = pytest.mark.usefixtures("fresh_proxy")


def _fenced(url: str):
    """A lease at `url` and a fence around it that records, not exits, when it fires."""
    holder = ObjectLease(url, ttl=TTL_S)
    fired: list[str] = []
    return holder, Fence(holder, on_lost=fired.append), fired


def test_a_write_is_cut_at_the_lease_deadline_and_refused_after_it(proxy):
    holder, fence, fired = _fenced(f"{ROOT}/cut/.lock")
    target = paths.as_path(f"{ROOT}/cut/metrics.jsonl")
    try:
        target.write_bytes(b"before")  # a healthy write passes the fence
        proxy.outage(TTL_S * 4)
        outcome = {}

        def write():  # retries through the outage: its budget (60 s) outlasts the lease
            started = time.monotonic()
            try:
                paths.retry(lambda: target.write_bytes(b"after"), "writing the metrics")
            except Exception as e:  # noqa: BLE001 - the test checks which
                outcome["error"] = e
            outcome["seconds"] = time.monotonic() - started

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(timeout=TTL_S * 3)
        assert not writer.is_alive(), "the write outlived the lease"
        assert isinstance(outcome["error"], LeaseLostError), outcome
        assert outcome["seconds"] < TTL_S * 3
        deadline = time.monotonic() + 10
        while not fired:  # the watchdog, at the same moment
            assert time.monotonic() < deadline, "the watchdog did not fire"
            time.sleep(0.05)
        # Which of two threads notices first, both at the lease's deadline, is the machine's
        # timing: the renewal's retry giving up, or a check finding no renewal in time.
        causes = ("was lost (storage did not answer for", "was lost (not renewed for")
        assert len(fired) == 1 and any(cause in fired[0] for cause in causes), fired
        assert "\n" not in fired[0]
        with pytest.raises(LeaseLostError, match="writes nothing more"):
            fence.check()
        assert len(fired) == 2
        proxy.clear()  # storage answers again; the lease stays lost and writes stay fenced
        sent = proxy.requests["write"]
        with pytest.raises(LeaseLostError):
            target.write_bytes(b"late")
        assert proxy.requests["write"] == sent, "a fenced write reached the proxy"
        assert target.read_bytes() == b"before"  # reads are not fenced
    finally:
        fence.close()
        holder.release()
    target.write_bytes(b"unfenced")  # a closed fence fences nothing
    assert target.read_bytes() == b"unfenced"


def test_the_lease_renews_through_the_fence_and_writes_go_on(proxy):
    holder, fence, fired = _fenced(f"{ROOT}/renewing/.lock")
    try:
        generation, deadline = holder._generation, time.monotonic() + 30
        while holder._generation == generation:  # a renewal at TTL/3 passes the fence
            assert time.monotonic() < deadline and not fired
            time.sleep(0.05)
        time.sleep(TTL_S)  # past the first renewal's TTL: only renewals keep it valid
        fence.check()
        paths.as_path(f"{ROOT}/renewing/config.json").write_bytes(b"{}")
        assert not fired
    finally:
        fence.close()
        holder.release()
    assert not paths.as_path(f"{ROOT}/renewing/.lock").exists()


def test_the_exit_path_keeps_the_fence_while_a_save_still_writes(proxy):
    """The run ends (its exit path) while a save's commit marker is retrying through an
    outage longer than the TTL: the fence and the lease stay up, the marker is cut at the
    lease's end and never lands when storage answers again."""
    holder, fence, fired = _fenced(f"{ROOT}/exit/.lock")
    marker = paths.as_path(f"{ROOT}/exit/checkpoints/6/commit_success.txt")
    outage_s = TTL_S * 2
    proxy.outage(outage_s)
    ended = time.monotonic() + outage_s
    outcome = {}

    def finalize():  # orbax's finalize thread: its last write is the commit marker
        try:
            paths.retry(lambda: marker.write_bytes(b"done"), "committing step 6")
        except Exception as e:  # noqa: BLE001 - the test checks which
            outcome["error"] = e

    save = threading.Thread(target=finalize)
    save.start()
    fence.release_when_quiet(holder, [save.is_alive])
    save.join(timeout=outage_s + 30)
    time.sleep(max(0.0, ended + 1 - time.monotonic()))  # storage answers again
    assert not marker.exists(), "the save wrote past the lease"
    assert isinstance(outcome.get("error"), LeaseLostError), outcome
    assert fired and "was lost" in fired[0]


@pytest.mark.parametrize("stream", ["full", "closed"])
def test_the_kill_switch_ends_the_process_whatever_its_message_meets(stream):
    """stderr a pipe nobody reads (full) or that nobody holds (closed): the watchdog's
    end_process still exits with the storage exit code."""
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_SWITCH_CHILD, stream],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=lease_module.__file__.rsplit("/xlnet_jax/", 1)[0],
    )
    if stream == "closed":
        child.stderr.close()
    try:
        assert child.wait(timeout=30) == STORAGE_EXIT_CODE
    finally:
        child.kill()
        child.wait()


KILL_SWITCH_CHILD = """
import os, sys, threading, time
from xlnet_jax.run import fence
if sys.argv[1] == "full":
    os.set_blocking(2, False)
    try:
        while True:
            os.write(2, b"x" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(2, True)
else:
    time.sleep(1)  # until the parent closed its end
threading.Thread(target=fence.end_process, args=("the lease was lost",), daemon=True).start()
time.sleep(60)
"""


def test_a_local_workdir_is_not_fenced():
    fence = Fence(None, on_lost=pytest.fail)
    fence.check()
    assert fence.remaining() == float("inf")
    fence.close()


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "ten"])
def test_a_bad_lease_ttl_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(lease_module.TTL_ENV, value)
    with pytest.raises(ConfigError, match=rf"\$XLNET_JAX_LEASE_TTL='{value}'.*seconds >= 1"):
        lease_module.lease_ttl()


def test_the_lease_ttl_comes_from_the_environment(monkeypatch):
    assert lease_module.lease_ttl() == lease_module.TTL_SECONDS
    monkeypatch.setenv(lease_module.TTL_ENV, "12.5")
    assert lease_module.lease_ttl() == 12.5
    assert issubclass(LeaseLostError, StorageError)  # the CLI's storage exit code
