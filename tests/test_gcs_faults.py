"""The fault-injecting proxy (tests/gcs_faults.py): each fault kind, its counters, its seed."""

import http.client
import json
import time
import urllib.error
import urllib.request

import gcsfs
import pytest

from tests import gcs_emulator, gcs_faults
from tests.gcs_faults import Fault

BUCKET = "xlnet-test-proxy"


@pytest.fixture(scope="module")
def proxy():
    with gcs_faults.running(seed=1, bucket=BUCKET) as proxy, gcs_emulator.pointed_at(proxy.url):
        yield proxy


pytestmark = pytest.mark.usefixtures("fresh_proxy")


def _put(proxy, name: str, data: bytes) -> int:
    request = urllib.request.Request(
        f"{proxy.url}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={name}",
        data=data,
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status


def _get(proxy, name: str) -> tuple[int, bytes, dict]:
    """(status, body, headers) of a media read; HTTP errors are returned, not raised."""
    url = f"{proxy.url}/storage/v1/b/{BUCKET}/o/{name}?alt=media"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


@pytest.mark.parametrize(
    "method, url, want",
    [
        ("GET", f"/storage/v1/b/{BUCKET}/o/a%2Fb?alt=media", "read"),
        ("GET", f"/download/storage/v1/b/{BUCKET}/o/a?alt=media", "read"),
        ("GET", f"/storage/v1/b/{BUCKET}/o?prefix=a/", "list"),
        ("GET", f"/storage/v1/b/{BUCKET}/o/a%2Fb", "metadata"),
        ("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart", "write"),
        ("PUT", "/upload/resumable/abc123", "chunk"),
        ("PUT", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&upload_id=x", "chunk"),
        ("DELETE", f"/storage/v1/b/{BUCKET}/o/a", "delete"),
    ],
)
def test_requests_are_classified(method, url, want):
    assert gcs_faults.classify(method, url) == want


@pytest.mark.parametrize("status, retry_after", [(429, 2.0), (500, None), (503, None), (503, 1)])
def test_a_status_fault_answers_instead_of_the_server(proxy, status, retry_after):
    _put(proxy, "status-object", b"payload")
    proxy.add(Fault("status", classes=("read",), status=status, retry_after=retry_after, times=1))
    got, body, headers = _get(proxy, "status-object")
    assert got == status and json.loads(body)["error"]["code"] == status
    assert headers.get("Retry-After") == (None if retry_after is None else f"{retry_after:g}")
    label = f"{status}+retry-after" if retry_after is not None else str(status)
    assert proxy.counts == {f"{label}:read": 1}
    assert _get(proxy, "status-object")[:2] == (200, b"payload")  # times=1: used up


def test_a_fault_after_the_upstream_write_loses_only_the_reply(proxy):
    proxy.add(Fault("status", classes=("write",), after_upstream=True, times=1))
    with pytest.raises(urllib.error.HTTPError, match="503"):
        _put(proxy, "written-anyway", b"landed")
    assert _get(proxy, "written-anyway")[:2] == (200, b"landed")
    assert proxy.injected("503-after-write", "write") == 1


def test_a_reset_cuts_the_reply_mid_body(proxy):
    _put(proxy, "reset-object", b"x" * 10_000)
    proxy.add(Fault("reset", classes=("read",), times=1))
    with pytest.raises((http.client.IncompleteRead, ConnectionError, urllib.error.URLError)):
        _get(proxy, "reset-object")
    assert proxy.injected("reset", "read") == 1
    assert _get(proxy, "reset-object")[1] == b"x" * 10_000


def test_a_stall_delays_the_request(proxy):
    _put(proxy, "stall-object", b"slow")
    proxy.add(Fault("stall", classes=("read",), stall_s=0.5, times=1))
    start = time.monotonic()
    assert _get(proxy, "stall-object")[:2] == (200, b"slow")
    assert time.monotonic() - start >= 0.5
    assert proxy.injected("stall") == 1


def test_an_outage_answers_503_for_its_window_then_ends(proxy):
    _put(proxy, "outage-object", b"back")
    proxy.outage(0.6)
    assert _get(proxy, "outage-object")[0] == 503
    with pytest.raises(urllib.error.HTTPError, match="503"):
        _put(proxy, "outage-object", b"lost")
    deadline = time.monotonic() + 10
    while proxy.in_outage():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _get(proxy, "outage-object")[:2] == (200, b"back")
    assert proxy.counts == {"outage:read": 1, "outage:write": 1}


def test_faults_are_drawn_from_the_seed(proxy):
    _put(proxy, "seeded", b"s")

    def pattern(seed: int) -> list[int]:
        proxy._random.seed(seed)
        proxy.clear()
        proxy.add(Fault("status", classes=("read",), probability=0.3))
        return [_get(proxy, "seeded")[0] for _ in range(20)]

    first = pattern(7)
    assert first == pattern(7) and 503 in first and 200 in first


def test_a_match_limits_a_fault_to_one_object(proxy):
    _put(proxy, "other", b"o")
    _put(proxy, "target", b"t")
    proxy.add(Fault("status", classes=("read",), match="target"))
    assert _get(proxy, "other")[0] == 200
    assert _get(proxy, "target")[0] == 503


def test_resumable_uploads_come_back_through_the_proxy_and_gcsfs_retries(proxy):
    fs = gcsfs.GCSFileSystem()
    data = bytes(range(256)) * (6 * 2**12)  # 6 MiB: larger than one block, so resumable
    proxy.add(Fault("status", classes=("chunk",), times=1))
    proxy.add(Fault("status", classes=("read",), status=429, times=1))
    with fs.open(f"{BUCKET}/big", "wb", block_size=5 * 2**20) as f:
        f.write(data)
    assert fs.cat_file(f"{BUCKET}/big") == data
    assert proxy.requests["chunk"] >= 2  # the session's location pointed at the proxy
    assert proxy.injected("503", "chunk") == 1 and proxy.injected("429", "read") == 1


def test_it_listens_on_loopback_only(proxy):
    assert proxy.bound_hosts() == {"127.0.0.1"}
