"""One emulator behind two paths, for tests where two runs see storage differently: two
fault proxies that note every request they forward (a test counts the writes of one run
that reached storage); and this process's gs:// clients made afresh for a given emulator."""

import contextlib
import time
from collections.abc import Iterator

import gcsfs
from etils.epath import backend

from tests import gcs_emulator, gcs_faults
from xlnet_jax.launch import local

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class PathProxy(gcs_faults.FaultProxy):
    """A FaultProxy that notes each request it forwards upstream, (time, method, URL), and
    points the emulator's resumable-upload locations back at itself: each run's uploads
    stay on its own path."""

    def __init__(self, *args, **kwargs):
        self.forwarded: list[tuple[float, str, str]] = []
        super().__init__(*args, **kwargs)

    async def _forward(self, request, body):
        self.forwarded.append((time.monotonic(), request.method, str(request.rel_url)))
        status, headers, content = await super()._forward(request, body)
        for name, value in headers.items():
            if name.lower() == "location":
                headers[name] = value.replace(self.upstream, self.url)
        return status, headers, content


@contextlib.contextmanager
def two_paths(bucket: str) -> Iterator[tuple[str, PathProxy, PathProxy]]:
    """One emulator with `bucket`, reached through two proxies; yields (its URL, the
    proxies)."""
    with gcs_emulator.running(bucket) as upstream:
        first = PathProxy(upstream, local.free_port())
        second = PathProxy(upstream, local.free_port())
        try:
            yield upstream, first, second
        finally:
            first.close()
            second.close()


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
