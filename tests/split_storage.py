"""One emulator behind two paths, for tests where two runs see storage differently: a
recording fault proxy for one (it notes every request it forwards, so a test counts the
writes that reached storage), a plain one for the other; and this process's gs:// clients
made afresh for a given emulator."""

import contextlib
import time
from collections.abc import Iterator

import gcsfs
from etils.epath import backend

from tests import gcs_emulator, gcs_faults

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class RecordingProxy(gcs_faults.FaultProxy):
    """A FaultProxy that notes each request it forwards upstream: (time, method, URL)."""

    def __init__(self, *args, **kwargs):
        self.forwarded: list[tuple[float, str, str]] = []
        super().__init__(*args, **kwargs)

    async def _forward(self, request, body):
        self.forwarded.append((time.monotonic(), request.method, str(request.rel_url)))
        return await super()._forward(request, body)


@contextlib.contextmanager
def two_paths(bucket: str) -> Iterator[tuple[str, "RecordingProxy", gcs_faults.FaultProxy]]:
    """One emulator; a recording proxy for A (resumable uploads point at it) and one for B."""
    port_a, port_b = gcs_faults._free_port(), gcs_faults._free_port()
    with gcs_emulator.running(bucket, external_url=f"http://127.0.0.1:{port_a}") as upstream:
        proxy_a = RecordingProxy(upstream, port_a)
        proxy_b = gcs_faults.FaultProxy(upstream, port_b)
        try:
            yield upstream, proxy_a, proxy_b
        finally:
            proxy_a.close()
            proxy_b.close()


@contextlib.contextmanager
def clients_at(url: str) -> Iterator[None]:
    """This process reads gs:// from `url`, through filesystems made for it (gcsfs and
    etils keep one per process, pointed wherever the first was)."""

    def forget():
        backend.fsspec_backend._get_filesystem.cache_clear()
        gcsfs.GCSFileSystem.clear_instance_cache()

    forget()
    try:
        with gcs_emulator.pointed_at(url):
            yield
    finally:
        forget()
