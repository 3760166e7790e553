"""A local GCS for the tests: the package's emulator (xlnet_jax/launch/emulator.py, which
names the variables that point every storage client at it), with one bucket, plus helpers
that look into it over its JSON API.
"""

import contextlib
import json
import os
import pathlib
import urllib.parse
import urllib.request
from collections.abc import Iterator

from xlnet_jax.launch import emulator

BUCKET = "xlnet-test"
environment = emulator.environment


@contextlib.contextmanager
def running(bucket: str = BUCKET, external_url: str = "") -> Iterator[str]:
    """Runs the emulator on a free port with `bucket` created; yields its URL, stops it on
    exit. `external_url` is where clients reach it (a proxy in front, tests/gcs_faults.py):
    its resumable-upload locations point there."""
    with emulator.running([bucket], external_url=external_url) as url:
        yield url


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
