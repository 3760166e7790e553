"""The workdir lease under storage faults, through the fault proxy (tests/gcs_faults.py):
renewals survive transient errors, a lost reply and a stalled request, an outage longer than
the TTL stops the holder before anyone else can take the lease, an unretryable error is never
swallowed, a damaged read is read again. Takers: a live holder in another PID namespace of
the same hostname, or a taker whose clock runs fast, never take a live lease. Every wait is
bounded."""

import datetime
import os
import socket
import time
import types

import pytest

from tests import gcs_emulator, gcs_faults
from tests.gcs_faults import Fault
from xlnet_jax import paths
from xlnet_jax.errors import StorageError, WorkdirError
from xlnet_jax.run import lease as lease_module
from xlnet_jax.run.lease import ObjectLease

ROOT = f"gs://{gcs_emulator.BUCKET}"
# Lease uploads, and only those, carry a generation precondition.
LEASE_WRITES = dict(classes=("write",), match="ifGenerationMatch")


@pytest.fixture(scope="module")
def proxy():
    retry = "first_delay_s=0.1,max_delay_s=0.5,budget_s=20"
    with gcs_faults.faulty_storage(seed=3, retry=retry) as proxy:
        yield proxy


pytestmark = pytest.mark.usefixtures("fresh_proxy")


def _until(condition, timeout: float, what: str):
    """Waits for `condition()` to be truthy, polling; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)
    return value


def _renewed(lease: ObjectLease, times: int = 1, timeout: float = 30):
    """Waits until `lease` has been renewed `times` more times."""
    seen, count = lease._generation, [0]

    def renewed():
        nonlocal seen
        if lease._generation != seen:
            seen, count[0] = lease._generation, count[0] + 1
        assert lease.lost() is None, lease.lost()
        return count[0] >= times

    _until(renewed, timeout, f"{times} renewal(s)")


def _lost(lease: ObjectLease) -> bool:
    try:
        lease.check()
    except WorkdirError:
        return True
    return False


def test_renewal_survives_a_transient_error(proxy):
    url = f"{ROOT}/lease-transient/.lock"
    holder = ObjectLease(url, ttl=6)
    proxy.add(Fault("status", status=503, times=1, **LEASE_WRITES))
    proxy.add(Fault("status", status=429, retry_after=1, times=1, **LEASE_WRITES))
    _renewed(holder, times=2)
    assert proxy.injected("503") == 1 and proxy.injected("429+retry-after") == 1
    holder.check()
    with pytest.raises(WorkdirError, match="Another run holds"):
        ObjectLease(url, ttl=6)
    holder.release()
    assert not paths.as_path(url).exists()


@pytest.mark.parametrize(
    "lost_reply",
    [
        Fault("reset", times=1, **LEASE_WRITES),
        Fault("status", after_upstream=True, times=1, **LEASE_WRITES),
    ],
    ids=["reset-mid-reply", "503-after-write"],
)
def test_a_renewal_whose_reply_was_lost_keeps_the_lease(proxy, lost_reply):
    url = f"{ROOT}/lease-lost-reply-{lost_reply.kind}/.lock"
    holder = ObjectLease(url, ttl=6)
    proxy.add(lost_reply)
    _until(lambda: lost_reply.times == 0, 30, "the lost reply")
    _renewed(holder)  # the write landed; its retry met 412, found our token, carried on
    assert proxy.injected(lost_reply.label(), "write") == 1
    holder.check()
    with pytest.raises(WorkdirError, match="Another run holds"):
        ObjectLease(url, ttl=6)
    holder.release()
    assert not paths.as_path(url).exists()


def test_an_outage_longer_than_the_ttl_stops_the_holder_before_anyone_takes_over(proxy):
    url = f"{ROOT}/lease-outage/.lock"
    holder = ObjectLease(url, ttl=2)
    proxy.outage(4)
    _until(lambda: _lost(holder), 10, "the holder to count its lease lost")
    stopped = time.monotonic()
    assert proxy.in_outage()  # it stopped while storage was still out
    _until(lambda: not proxy.in_outage(), 10, "the outage to end")

    def take():
        try:
            return ObjectLease(url, ttl=2)
        except (WorkdirError, StorageError):
            return None  # a late renewal of the holder landed: wait for it to go stale

    taker = _until(take, 60, "a new holder")
    taken = lease_module.clock()
    # Never two holders: the holder stopped counting on its lease before the taker took it.
    assert holder.safe_until < taken and stopped < time.monotonic() and _lost(holder)
    assert proxy.injected("outage") >= 1
    holder.release()  # leaves the taker's lease alone
    assert paths.as_path(url).exists()
    taker.check()
    taker.release()


def test_an_error_it_cannot_retry_reaches_the_loop(proxy):
    url = f"{ROOT}/lease-forbidden/.lock"
    holder = ObjectLease(url, ttl=6)
    proxy.add(Fault("status", status=403, times=1, **LEASE_WRITES))
    _until(lambda: holder._lost, 30, "the renewal to fail")
    assert holder._renewer.join(timeout=10) is None and not holder._renewer.is_alive()
    with pytest.raises(WorkdirError, match="was lost .*Forbidden"):
        holder.check()
    assert proxy.injected("403", "write") == 1
    holder.release()


def _dead_pid() -> int:
    """A pid that names no process here."""
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


@pytest.mark.parametrize("same_namespace", [False, True], ids=["other-namespace", "same"])
def test_a_holder_of_the_same_hostname_is_judged_by_its_whole_identity(
    proxy, monkeypatch, same_namespace
):
    """A holder whose pid does not exist here: in another PID namespace (a container with
    host networking) it is alive as far as anyone here knows, and keeps its lease until the
    TTL; in ours, it is gone, and its lease is taken at once."""
    url = f"{ROOT}/lease-namespace-{same_namespace}/.lock"
    me = lease_module.holder_identity()
    other = {**me, "pid": _dead_pid(), "started": "12345"}
    if not same_namespace:
        other["pid_namespace"] = "pid:[4026599999]"
    with monkeypatch.context() as patch:
        patch.setattr(lease_module, "holder_identity", lambda: other)
        holder = ObjectLease(url, ttl=3)  # renewed every second
    try:
        if same_namespace:
            assert not lease_module.holder_gone(me)  # this very process: alive
            assert lease_module.holder_gone({**me, "started": "1"})  # its pid, reused
            taker = ObjectLease(url, ttl=3)
            taker.release()
            return
        for _ in range(2):
            with pytest.raises(WorkdirError, match=f"Another run holds .*host {me['host']}"):
                ObjectLease(url, ttl=3)
            _renewed(holder)
        holder.check()
    finally:
        holder.release()


def test_a_taker_whose_clock_runs_60_s_fast_leaves_a_live_lease_alone(proxy, monkeypatch):
    url = f"{ROOT}/lease-fast-clock/.lock"
    holder = ObjectLease(url, ttl=6)

    class FastClock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime.now(tz) + datetime.timedelta(seconds=60)

    monkeypatch.setattr(lease_module, "datetime", types.SimpleNamespace(
        datetime=FastClock, UTC=datetime.UTC, timedelta=datetime.timedelta
    ))  # fmt: skip
    try:
        with pytest.raises(WorkdirError, match="Another run holds"):
            ObjectLease(url, ttl=6)
        holder.check()
    finally:
        holder.release()


def test_a_renewal_stalled_past_the_lease_is_cut_and_retried_in_time(proxy):
    url = f"{ROOT}/lease-stalled/.lock"
    holder = ObjectLease(url, ttl=6)  # renewed every 2 s; lost 5 s after a renewal's send
    try:
        stall = proxy.add(Fault("stall", stall_s=7, times=1, **LEASE_WRITES))
        _until(lambda: stall.times == 0, 10, "the stalled renewal")
        stalled_at = time.monotonic()
        _renewed(holder, times=2)  # each poll asserts the lease was never lost
        assert time.monotonic() - stalled_at < 6
        holder.check()
        with pytest.raises(WorkdirError, match="Another run holds"):
            ObjectLease(url, ttl=6)
    finally:
        holder.release()


def test_a_lease_body_that_arrives_damaged_is_read_again(proxy):
    url = f"{ROOT}/lease-damaged-read/.lock"
    holder = ObjectLease(url, ttl=6)
    try:
        proxy.add(Fault("corrupt", classes=("read",), match=".lock", times=1))
        with pytest.raises(WorkdirError, match=f"Another run holds .*host {socket.gethostname()}"):
            ObjectLease(url, ttl=6)
        assert proxy.injected("corrupt", "read") == 1
    finally:
        holder.release()
