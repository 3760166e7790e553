"""The fault proxy answers 412 where GCS does: a write whose ifGenerationMatch or
ifMetagenerationMatch no longer holds (tests/gcs_preconditions.py), on every kind of write
that carries one. So a conditional write retried after its reply was lost fails as on GCS,
where fake-gcs-server alone lets a media upload land twice."""

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests import gcs_faults
from tests.gcs_faults import Fault

BUCKET = "xlnet-test-preconditions"
BOUNDARY = "xlnet-test-boundary"


@pytest.fixture(scope="module")
def proxy():
    with gcs_faults.running(seed=3, bucket=BUCKET) as proxy:
        yield proxy


pytestmark = pytest.mark.usefixtures("fresh_proxy")


def _call(base: str, method: str, path: str, data: bytes | None = None, **headers: str):
    """(status, body, headers) of one request; HTTP errors are returned, not raised."""
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def _media(base: str, name: str, data: bytes, **conditions: str):
    query = urllib.parse.urlencode({"uploadType": "media", "name": name, **conditions})
    return _call(base, "POST", f"/upload/storage/v1/b/{BUCKET}/o?{query}", data)


def _multipart(base: str, name: str, data: bytes, **conditions: str):
    query = urllib.parse.urlencode({"uploadType": "multipart", **conditions})
    part = f"--{BOUNDARY}\r\nContent-Type: application/json\r\n\r\n"
    body = f"{part}{json.dumps({'name': name})}\r\n{part}".encode() + data
    body += f"\r\n--{BOUNDARY}--".encode()
    content_type = f'multipart/related; boundary="{BOUNDARY}"'
    return _call(
        base,
        "POST",
        f"/upload/storage/v1/b/{BUCKET}/o?{query}",
        body,
        **{"Content-Type": content_type},
    )


def _object(base: str, name: str) -> tuple[bytes, dict]:
    """(content, metadata) of an object, read from `base`."""
    quoted = urllib.parse.quote(name, safe="")
    status, content, _ = _call(base, "GET", f"/storage/v1/b/{BUCKET}/o/{quoted}?alt=media")
    assert status == 200, status
    status, metadata, _ = _call(base, "GET", f"/storage/v1/b/{BUCKET}/o/{quoted}")
    return content, json.loads(metadata)


UPLOADS = {"media": _media, "multipart": _multipart}


def test_fake_gcs_server_alone_ignores_a_media_uploads_precondition(proxy):
    """Why the proxy checks: the emulator behind it lets a stale media upload land."""
    assert _media(proxy.upstream, "unchecked", b"first")[0] == 200
    assert _media(proxy.upstream, "unchecked", b"second", ifGenerationMatch="0")[0] == 200
    assert _object(proxy.upstream, "unchecked")[0] == b"second"


@pytest.mark.parametrize("kind", UPLOADS)
def test_an_upload_lands_only_while_its_generation_matches(proxy, kind):
    upload, name = UPLOADS[kind], f"{kind}-generation"
    assert upload(proxy.url, name, b"one", ifGenerationMatch="0")[0] == 200
    _, metadata = _object(proxy.url, name)
    status, body, _ = upload(proxy.url, name, b"two", ifGenerationMatch="0")
    assert status == 412 and json.loads(body)["error"]["code"] == 412
    stale = str(int(metadata["generation"]) + 1)
    assert upload(proxy.url, name, b"two", ifGenerationMatch=stale)[0] == 412
    assert _object(proxy.url, name)[0] == b"one"
    assert upload(proxy.url, name, b"two", ifGenerationMatch=metadata["generation"])[0] == 200
    assert _object(proxy.url, name)[0] == b"two"
    assert upload(proxy.url, f"{kind}-absent", b"x", ifGenerationMatch="1")[0] == 412
    assert proxy.preconditions_failed == 3


@pytest.mark.parametrize("kind", UPLOADS)
def test_a_conditional_write_retried_after_its_reply_was_lost_gets_412(proxy, kind):
    upload, name = UPLOADS[kind], f"{kind}-lost-reply"
    proxy.add(Fault("status", status=503, classes=("write",), after_upstream=True, times=1))
    assert upload(proxy.url, name, b"landed", ifGenerationMatch="0")[0] == 503
    assert upload(proxy.url, name, b"retried", ifGenerationMatch="0")[0] == 412  # as on GCS
    assert _object(proxy.url, name)[0] == b"landed"
    assert proxy.injected("503-after-write", "write") == 1 and proxy.preconditions_failed == 1


def test_a_metadata_patch_and_a_delete_check_their_preconditions(proxy):
    assert _media(proxy.url, "patched", b"p")[0] == 200
    _, metadata = _object(proxy.url, "patched")
    path = f"/storage/v1/b/{BUCKET}/o/patched"
    patch = json.dumps({"metadata": {"k": "v"}}).encode()
    json_type = {"Content-Type": "application/json"}
    stale_meta = str(int(metadata["metageneration"]) + 1)
    query = f"?ifMetagenerationMatch={stale_meta}"
    assert _call(proxy.url, "PATCH", path + query, patch, **json_type)[0] == 412
    query = f"?ifMetagenerationMatch={metadata['metageneration']}"
    assert _call(proxy.url, "PATCH", path + query, patch, **json_type)[0] == 200
    stale = str(int(metadata["generation"]) + 1)
    assert _call(proxy.url, "DELETE", f"{path}?ifGenerationMatch={stale}")[0] == 412
    assert _object(proxy.url, "patched")[0] == b"p"  # not deleted
    current = f"{path}?ifGenerationMatch={metadata['generation']}"
    assert _call(proxy.url, "DELETE", current)[0] in (200, 204)  # GCS: 204, the emulator: 200
    assert _call(proxy.url, "GET", path)[0] == 404  # deleted
    missing = f"/storage/v1/b/{BUCKET}/o/never-written?ifGenerationMatch=5"
    assert _call(proxy.url, "DELETE", missing)[0] == 404  # the server's answer, as on GCS
    assert proxy.preconditions_failed == 2


def test_a_resumable_upload_checks_at_its_start_and_at_its_last_chunk(proxy):
    def start(name: str) -> tuple[int, str]:
        query = urllib.parse.urlencode(
            {"uploadType": "resumable", "name": name, "ifGenerationMatch": "0"}
        )
        status, _, headers = _call(
            proxy.url, "POST", f"/upload/storage/v1/b/{BUCKET}/o?{query}", b"",
            **{"Content-Type": "application/json"},
        )  # fmt: skip
        return status, headers.get("Location", "")

    assert _media(proxy.url, "resumable-taken", b"there")[0] == 200
    assert start("resumable-taken")[0] == 412  # the object exists already

    status, location = start("resumable-raced")
    assert status == 200 and location.startswith(proxy.url), location
    assert _media(proxy.url, "resumable-raced", b"another writer")[0] == 200  # meanwhile
    data = b"mine"
    last = {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
    assert _call(location, "PUT", "", data, **last)[0] == 412
    assert _object(proxy.url, "resumable-raced")[0] == b"another writer"

    status, location = start("resumable-clean")
    assert status == 200 and _call(location, "PUT", "", data, **last)[0] in (200, 201)
    assert _object(proxy.url, "resumable-clean")[0] == data
    # Its last chunk sent again (a lost reply) finds the session complete, as on GCS: it
    # is no new write, so it is not checked against the object it created.
    assert _call(location, "PUT", "", data, **last)[0] != 412
    assert proxy.preconditions_failed == 2
