"""A fault-injecting HTTP proxy on loopback, between GCS clients and fake-gcs-server.

Every request is classified (object read, write, list, delete, resumable upload chunk,
metadata) and forwarded, unless a scripted fault answers it instead:

- `status`: HTTP 429/500/503, with or without Retry-After; with `after_upstream` the
  request is forwarded first (the write happened, its reply is lost as an error);
- `reset`: the request is forwarded, then the connection is cut mid-body of the reply;
- `stall`: the request waits `stall_s` seconds before it is forwarded;
- `corrupt`: the reply's body arrives whole but with one byte changed;
- an outage: every request is answered 503 for a window of time, from now (`outage`) or
  from the first request that matches an "outage" fault (e.g. one of a checkpoint save).

A write that carries `ifGenerationMatch` / `ifMetagenerationMatch` is checked by the proxy
before it is forwarded, and answered 412 when the object no longer matches, as GCS does
(tests/gcs_preconditions.py); so a conditional write retried after its reply was lost
fails as it would on GCS. Such writes to one object are serialised across every proxy of
the process, so a check and its write are one step.

Faults are drawn from one seeded random generator, so a run's faults repeat for a seed;
`counts` says what was injected, so a test asserts the faults really happened. The
emulator is started with `-external-url` = the proxy's URL, so resumable-upload locations
point back through the proxy (tests/gcs_emulator.py).
"""

import asyncio
import collections
import contextlib
import dataclasses
import json
import random
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, quote, unquote, urlsplit

import aiohttp
import pytest
from aiohttp import web

from tests import gcs_emulator, gcs_preconditions
from xlnet_jax import paths
from xlnet_jax.launch import local

CLASSES = ("read", "write", "list", "delete", "chunk", "metadata")
_HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}
# One lock per (emulator, bucket, object) for conditional writes, shared by all proxies.
_OBJECT_LOCKS: collections.defaultdict[tuple[str, str, str], threading.Lock] = (
    collections.defaultdict(threading.Lock)
)


def classify(method: str, url: str) -> str:
    """The request class of `method url` in the GCS JSON API (and its upload paths)."""
    parts = urlsplit(url)
    path, query = parts.path, parse_qs(parts.query)
    if method == "DELETE":
        return "delete"
    if path.startswith("/upload/resumable/") or query.get("upload_id"):
        return "chunk"  # a resumable session's PUT (or its status query)
    if path.startswith("/upload/") or method in ("POST", "PATCH", "PUT"):
        return "write"  # simple, multipart and resumable starts; copy, rewrite, compose
    if path.startswith("/download/") or query.get("alt") == ["media"]:
        return "read"
    if path.rstrip("/").endswith("/o"):
        return "list"
    if "/o/" in path or "/b/" in path:
        return "metadata"
    return "read"  # the XML API's GET /bucket/object


@dataclasses.dataclass
class Fault:
    """One scripted fault: what it does, to which requests, how often, how many times.

    Attributes:
      kind: "status", "reset", "stall", "corrupt" or "outage" (starts one of `outage_s`).
      classes: request classes it applies to (default: all).
      probability: chance per matching request; 1.0 with `times` scripts the next N.
      times: at most this many injections (None: no limit).
      status, retry_after: the answer of a "status" fault (Retry-After header if set).
      after_upstream: a "status" fault forwards the request first (its reply is lost).
      stall_s: the delay of a "stall" fault.
      match: only requests whose URL contains this text (e.g. an object's name).
    """

    kind: str
    classes: tuple[str, ...] = CLASSES
    probability: float = 1.0
    times: int | None = None
    status: int = 503
    retry_after: float | None = None
    after_upstream: bool = False
    stall_s: float = 0.0
    outage_s: float = 0.0
    match: str = ""

    def label(self) -> str:
        if self.kind == "status":
            suffix = "+retry-after" if self.retry_after is not None else ""
            return f"{self.status}{suffix}{'-after-write' if self.after_upstream else ''}"
        return self.kind

    def applies(self, request_class: str, url: str) -> bool:
        return (
            request_class in self.classes
            and self.match in unquote(url)
            and (self.times is None or self.times > 0)
        )


class FaultProxy:
    """The proxy, served from a thread of its own on 127.0.0.1; see the module docstring."""

    def __init__(self, upstream: str, port: int, seed: int = 0):
        self.upstream = upstream.rstrip("/")
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.faults: list[Fault] = []
        self.counts: collections.Counter[str] = collections.Counter()  # "label:class"
        self.requests: collections.Counter[str] = collections.Counter()  # per class
        self.preconditions_failed = 0  # conditional writes answered 412 by the proxy
        self._sessions: dict[str, gcs_preconditions.Write] = {}  # resumable, by session key
        self._random = random.Random(seed)
        self._outage_until = 0.0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="gcs-faults")
        self._thread.start()
        if not self._ready.wait(20):
            raise TimeoutError("the fault proxy did not start within 20 s")

    def add(self, fault: Fault) -> Fault:
        """Scripts `fault` from now on; returns it (its `times` counts down)."""
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Removes every scripted fault and ends any outage."""
        with self._lock:
            self.faults.clear()
            self._outage_until = 0.0

    def reset(self) -> None:
        """No scripted faults and zeroed counters: a test starts from a healthy store."""
        self.clear()
        self.counts.clear()
        self.preconditions_failed = 0

    def outage(self, seconds: float) -> None:
        """Answers every request 503 for `seconds` from now."""
        with self._lock:
            self._outage_until = time.monotonic() + seconds

    def in_outage(self) -> bool:
        return time.monotonic() < self._outage_until

    def injected(self, label: str = "", request_class: str = "") -> int:
        """How many faults were injected, of `label` and/or `request_class` if given."""
        return sum(
            n
            for key, n in self.counts.items()
            if key.startswith(f"{label}:" if label else "")
            and key.endswith(f":{request_class}" if request_class else "")
        )

    def bound_hosts(self) -> set[str]:
        """The addresses the proxy listens on."""
        return {address[0] for address in self._runner.addresses}

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # The server, in the proxy's thread.

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=2**31)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._runner = runner
        self._session = self._loop.run_until_complete(_client_session())
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._session.close())
            self._loop.run_until_complete(runner.cleanup())
            self._loop.close()

    def _draw(self, request_class: str, url: str) -> Fault | None:
        with self._lock:
            self.requests[request_class] += 1
            if self.in_outage():
                self.counts[f"outage:{request_class}"] += 1
                return Fault("status", status=503)
            for fault in self.faults:
                if fault.applies(request_class, url) and self._random.random() < fault.probability:
                    if fault.times is not None:
                        fault.times -= 1
                    self.counts[f"{fault.label()}:{request_class}"] += 1
                    if fault.kind == "outage":
                        self._outage_until = time.monotonic() + fault.outage_s
                        return Fault("status", status=503)
                    return fault
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        request_class = classify(request.method, str(request.rel_url))
        body = await request.read()
        fault = self._draw(request_class, str(request.rel_url))
        if fault is not None and fault.kind == "stall":
            await asyncio.sleep(fault.stall_s)
        if fault is not None and fault.kind == "status" and not fault.after_upstream:
            return _error(fault)
        status, headers, content = await self._forward_checked(request, body)
        if fault is not None and fault.kind == "status":
            return _error(fault)
        if fault is not None and fault.kind == "reset":
            return await _cut(request, status, headers, content)
        if fault is not None and fault.kind == "corrupt" and content:
            content = bytes([content[0] ^ 0xFF]) + content[1:]
        return web.Response(status=status, headers=headers, body=content)

    async def _forward_checked(self, request: web.Request, body: bytes) -> tuple[int, dict, bytes]:
        """`_forward`, unless the write's preconditions fail: then GCS's 412, not forwarded."""
        url = str(request.rel_url)
        write = gcs_preconditions.conditional_write(
            request.method, url, request.headers.get("Content-Type", ""), body
        )
        session = gcs_preconditions.session_key(url)
        last_chunk = gcs_preconditions.is_last_chunk(request.headers.get("Content-Range", ""))
        if write is None and last_chunk:
            write = self._sessions.get(session)
        if write is None:
            return await self._forward(request, body)
        lock = _OBJECT_LOCKS[(self.upstream, write.bucket, write.name)]
        while not lock.acquire(blocking=False):  # never blocks the proxy's event loop
            await asyncio.sleep(0.005)
        try:
            reason = write.failure(await self._metadata(write))
            if reason is not None:
                self.preconditions_failed += 1
                return _precondition_failed(reason)
            status, headers, content = await self._forward(request, body)
        finally:
            lock.release()
        if status in (200, 201) and gcs_preconditions.is_resumable_start(request.method, url):
            location = gcs_preconditions.session_key(headers.get("Location", ""))
            self._sessions[location] = write
        elif status in (200, 201):
            self._sessions.pop(session, None)  # a completed session is not checked again
        return status, headers, content

    async def _metadata(self, write: gcs_preconditions.Write) -> dict | None:
        """The object's metadata from the emulator itself (no faults), None if absent."""
        name = quote(write.name, safe="")
        url = f"{self.upstream}/storage/v1/b/{write.bucket}/o/{name}"
        async with self._session.get(url) as reply:
            if reply.status == 404:
                return None
            reply.raise_for_status()
            return json.loads(await reply.read())

    async def _forward(self, request: web.Request, body: bytes) -> tuple[int, dict, bytes]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        async with self._session.request(
            request.method,
            self.upstream + str(request.rel_url),
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
        ) as reply:
            content = await reply.read()
            kept = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_HEADERS}
            return reply.status, kept, content


async def _client_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(auto_decompress=False)


def _error(fault: Fault) -> web.Response:
    headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
    return web.json_response(
        {"error": {"code": fault.status, "message": f"injected, {fault.status}"}},
        status=fault.status,
        headers=headers,
    )


def _precondition_failed(reason: str) -> tuple[int, dict, bytes]:
    """GCS's answer to a write whose precondition failed."""
    message = f"At least one of the pre-conditions you specified did not hold ({reason})."
    error = {"code": 412, "message": message, "errors": [{"reason": "conditionNotMet"}]}
    body = json.dumps({"error": error}).encode()
    return 412, {"Content-Type": "application/json; charset=UTF-8"}, body


async def _cut(request: web.Request, status: int, headers: dict, content: bytes):
    """Sends the reply's headers and half its body, then cuts the connection."""
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = max(len(content), 2)
    await response.prepare(request)
    await response.write(content[: len(content) // 2])
    request.transport.abort() if request.transport else None
    return response


@contextlib.contextmanager
def running(seed: int = 0, bucket: str = gcs_emulator.BUCKET) -> Iterator[FaultProxy]:
    """fake-gcs-server behind a FaultProxy (no faults scripted yet); yields the proxy."""
    port = local.free_port()
    with gcs_emulator.running(bucket, external_url=f"http://127.0.0.1:{port}") as upstream:
        proxy = FaultProxy(upstream, port, seed)
        try:
            yield proxy
        finally:
            proxy.close()


@contextlib.contextmanager
def faulty_storage(
    seed: int, retry: str, bucket: str = gcs_emulator.BUCKET, **env: str
) -> Iterator[FaultProxy]:
    """`running`, with gs:// clients pointed at the proxy, our retry policy set to `retry`
    ($XLNET_JAX_STORAGE_RETRY: gcsfs's requests follow it too) and other environment
    variables `env`; one per module, each with its own `bucket`."""
    with (
        pytest.MonkeyPatch.context() as patch,
        running(seed=seed, bucket=bucket) as proxy,
        gcs_emulator.pointed_at(proxy.url),
    ):
        patch.setenv(paths.RETRY_ENV, retry)
        for name, value in env.items():
            patch.setenv(name, value)
        paths.use_storage()  # a gcsfs client made directly follows the policy too
        yield proxy
