"""The workdir lease under storage faults, through the fault proxy (tests/gcs_faults.py):
renewals survive transient errors, a lost reply is recognised, an outage longer than the
TTL stops the holder before anyone else can take the lease, an unretryable error is never
swallowed. Every wait is bounded."""

import time

import pytest

from tests import gcs_emulator, gcs_faults
from tests.gcs_faults import Fault
from xlnet_jax import paths
from xlnet_jax.errors import StorageError, WorkdirError
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
        assert lease._lost is None, lease._lost
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
    assert stopped < time.monotonic() and _lost(holder)  # never two holders
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
