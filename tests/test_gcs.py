"""The workdir lease on gs://, against a local GCS (tests/gcs_emulator.py): it excludes a
live holder, passes on when released, and a stale one is taken over while its holder learns
it. (The pod workflow on gs://, through the CLI: tests/test_gcs_faults_e2e.py.)"""

import time

import pytest

from tests import gcs_emulator
from xlnet_jax import paths
from xlnet_jax.errors import WorkdirError
from xlnet_jax.run.lease import ObjectLease

BUCKET = "xlnet-test-gcs"  # this module's own: nothing it reads was left by another
ROOT = f"gs://{BUCKET}"


@pytest.fixture(scope="module")
def gcs():
    """The emulator's URL; this process's clients point at it while the module runs."""
    with gcs_emulator.running(BUCKET) as url, gcs_emulator.pointed_at(url):
        yield url


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
    time.sleep(1.6)  # past the TTL by storage's clock, whose Date counts whole seconds
    taker = ObjectLease(url, ttl=0.5)
    assert not stalled._renew()
    with pytest.raises(WorkdirError, match="was lost"):
        stalled.check()
    stalled.release()  # leaves the taker's lease alone
    assert paths.as_path(url).exists()
    taker.release()
    assert not paths.as_path(url).exists()
