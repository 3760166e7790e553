"""The workdir lock on object storage: a lease object written under generation preconditions.

GCS has no flock and no process that could drop a lock when its holder dies, so the lock
is a lease, an object holding its holder's identity and a token:

- Taking it is a create-if-absent upload (`ifGenerationMatch=0`): of processes that try
  at once, exactly one succeeds; the others get HTTP 412.
- The holder renews it every TTL/3 with an upload conditioned on its own generation.
- A lease is stale when its last renewal (GCS's `updated` time) is older than TTL by the
  storage server's own clock (the `Date` of the reply that read it; no host clock takes
  part), or when its holder is this very machine's process and that process is gone. "This
  very machine" means the same hostname, boot id and PID namespace: containers that share
  a hostname (host networking) do not share PIDs, so only then can the holder's pid be
  asked; "gone" means no process of that pid, or one that started at another time (the
  pid was reused). A run killed and restarted in the same container resumes at once;
  any other taker waits out the TTL. A stale lease is taken over by an upload
  conditioned on the generation that was read stale, so of two takers exactly one wins.
- Release deletes it, conditioned on the holder's generation.

Under faults (paths.retry): each lease request is cut after a share of the time the lease
has left (at most TTL/6) and retried, so one stalled request cannot outlive the lease; a
failed renewal is retried until shortly before the lease would expire (TTL after the
newest renewal was sent, less TTL/6); a renewal whose write landed but whose reply was
lost meets 412 on its retry, finds its own token in the object and carries on; a lease
body that cannot be read is read again, never taken for an empty one. The holder counts
itself lost once that time passes without a renewal, or on any error it cannot retry, or
when another run took the lease over: `check()` then raises, whatever state the renewal
thread is in. `safe_until` is that moment, on `clock()`: CLOCK_BOOTTIME on Linux, which
goes on counting while the machine is suspended (time.monotonic stops), so a holder
resumed from a suspend knows its lease has run out. A training run fences every write of
its own by it (fence.py).

What it guarantees: two live runs never both hold one lease: a taker needs the lease
unrenewed for TTL by the server's clock, and the holder stops counting on it TTL/6 before
that by its own elapsed time, which no clock setting moves.

The TTL is 90 s; $XLNET_JAX_LEASE_TTL sets another (seconds, e.g. 12 in the tests that hold
an outage longer than it).
"""

import datetime
import email.utils
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING

from xlnet_jax import paths
from xlnet_jax.errors import ConfigError, LeaseLostError, StorageError, WorkdirError

if TYPE_CHECKING:  # gcsfs is imported where a gs:// lease is made: local runs start faster
    import gcsfs

log = logging.getLogger(__name__)

TTL_SECONDS = 90.0
TTL_ENV = "XLNET_JAX_LEASE_TTL"


def lease_ttl() -> float:
    """The lease TTL in seconds: $XLNET_JAX_LEASE_TTL if set, else TTL_SECONDS."""
    text = os.environ.get(TTL_ENV, "").strip()
    if not text:
        return TTL_SECONDS
    try:
        ttl = float(text)
    except ValueError:
        ttl = math.nan
    if not (math.isfinite(ttl) and ttl >= 1):
        raise ConfigError(
            f"${TTL_ENV}={text!r}: the workdir lease's TTL must be a number of seconds >= 1 "
            f"(default {TTL_SECONDS:g}); unset it or fix it."
        )
    return ttl


def clock() -> float:
    """Seconds on a clock that counts a suspend of the machine (CLOCK_BOOTTIME on Linux;
    elsewhere time.monotonic); the lease's time left is measured on it."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat's field 22);
    None if there is no such process here (or no /proc)."""
    stat = _first_line(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def holder_identity() -> dict:
    """This process, as a lease records it: enough to tell it from a process of the same
    pid on another machine, in another container of the same hostname, or a pid reused."""
    return {
        "host": socket.gethostname(),
        "boot_id": _first_line("/proc/sys/kernel/random/boot_id"),
        "pid_namespace": _pid_namespace(),
        "pid": os.getpid(),
        "started": start_time(os.getpid()),
    }


def holder_gone(body: dict) -> bool:
    """Whether the lease's holder is known to be gone: it ran on this very machine and
    namespace (hostname, boot id and PID namespace all equal ours, none unknown) and its
    pid now names no process, or one started at another time. Anything less certain is
    False: the taker waits out the TTL."""
    here = holder_identity()
    same_place = all(
        body.get(key) is not None and body.get(key) == here[key]
        for key in ("host", "boot_id", "pid_namespace")
    )
    if not same_place or not isinstance(body.get("pid"), int) or body.get("started") is None:
        return False
    return start_time(body["pid"]) != body["started"]


class _UnreadableLease(ConnectionError):
    """The lease body did not parse: a damaged reply, retried like any transient fault."""


_BOUNDARY = "xlnet-jax-lease"


class ObjectLease:
    """Holds the lease at `url` (gs://bucket/key) until release(), renewing it in a thread."""

    def __init__(self, url: str, ttl: float | None = None):
        self.url = url
        self._ttl = lease_ttl() if ttl is None else ttl
        ttl = self._ttl
        # A filesystem of its own, so that fence.py can tell the lease's requests (which
        # must go on while the run's other writes are fenced) from every other one.
        import gcsfs

        self._fs = gcsfs.GCSFileSystem(skip_instance_cache=True)
        self._bucket, self._key, _ = self._fs.split_path(url)
        self._token = uuid.uuid4().hex
        self.identity = holder_identity()
        self._body = json.dumps(
            {"holder": "xlnet-jax", **self.identity, "token": self._token}
        ).encode()
        self._lost: str | None = None
        # Before the lease is held, a request may take TTL/6, like a renewal's.
        self._valid_until = math.inf
        sent = clock()
        self._generation = paths.retry(self._acquire, f"taking the workdir lease {url}")
        self._valid_until = sent + ttl
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="lease")
        self._renewer.start()

    def _acquire(self) -> str:
        for _ in range(3):  # the object may come and go between our requests
            try:
                return self._upload(if_generation="0")
            except FileExistsError:
                pass
            held = self._read()
            if held is not None:
                return self._take_from(*held)
        raise WorkdirError(
            f"The workdir lease {self.url} keeps being taken and released by another run; "
            "stop that run or use a different --workdir."
        )

    def _take_from(self, body: dict, generation: str, age: float) -> str:
        """Takes the lease read as (body, generation, age) if it is stale; else explains."""
        if body.get("token") == self._token:  # our create succeeded; its reply was lost
            return generation
        if not (age > self._ttl or holder_gone(body)):
            raise WorkdirError(
                f"Another run holds the workdir lease {self.url} (host {body.get('host')}, pid "
                f"{body.get('pid')}, renewed {age:.0f} s ago by storage's clock; it expires "
                f"{self._ttl:.0f} s after its last renewal). Stop that run or wait, or use a "
                "different --workdir."
            )
        try:
            generation = self._upload(if_generation=generation)
        except FileExistsError:
            held = self._read()
            if held is not None and held[0].get("token") == self._token:
                return held[1]  # our takeover landed; its reply was lost
            raise WorkdirError(
                f"Another run took over the stale workdir lease {self.url} just now; use a "
                "different --workdir or stop that run."
            ) from None
        log.warning(
            "Took over the stale workdir lease %s (host %s, pid %s, renewed %.0f s ago).",
            self.url,
            body.get("host"),
            body.get("pid"),
            age,
        )
        return generation

    def _call(self, *args, **kwargs):
        """One request of the lease, cut after half the time the lease has left, at most
        TTL/6 (at least 1 s): a stalled one is retried while time remains."""
        bound = max(min(self._ttl / 6, (self._valid_until - clock()) / 2), 1.0)
        import fsspec.asyn

        return fsspec.asyn.sync(self._fs.loop, self._fs._call, *args, timeout=bound, **kwargs)

    def _read(self) -> tuple[dict, str, float] | None:
        """(body, generation, seconds since its last write by storage's clock), or None if
        there is none. A body that does not parse raises _UnreadableLease (retried)."""
        try:
            headers, meta = self._call("GET", "b/{}/o/{}", self._bucket, self._key)
            info = json.loads(meta)
            _, content = self._call(
                "GET", "b/{}/o/{}", self._bucket, self._key, alt="media",
                generation=info["generation"],
            )  # fmt: skip
        except FileNotFoundError:
            return None
        try:
            body = json.loads(content)
            if not isinstance(body, dict):
                raise ValueError(f"not an object: {content[:80]!r}")
        except ValueError as e:
            raise _UnreadableLease(f"the lease {self.url} did not parse ({e})") from None
        updated = datetime.datetime.fromisoformat(info["updated"].replace("Z", "+00:00"))
        date = headers.get("Date")  # whole seconds, cut down: an age never overstated
        now = (
            email.utils.parsedate_to_datetime(date)
            if date
            else datetime.datetime.now(datetime.UTC)  # a server without Date: our clock
        )
        age = (now - updated).total_seconds()
        return body, str(info["generation"]), age

    def _upload(self, if_generation: str) -> str:
        """Writes the lease body if the object's generation matches; its new generation.

        A multipart upload (JSON metadata + body), as gcsfs's own writes: the emulator
        honours preconditions on this upload type.
        """
        metadata = json.dumps({"name": self._key, "contentType": "application/json"})
        part = f"--{_BOUNDARY}\r\nContent-Type: application/json\r\n\r\n"
        body = f"{part}{metadata}\r\n{part}".encode() + self._body + f"\r\n--{_BOUNDARY}--".encode()
        _, reply = self._call(
            "POST",
            f"{self._fs._location}/upload/storage/v1/b/{self._bucket}/o",
            uploadType="multipart",
            ifGenerationMatch=if_generation,
            data=body,
            headers={"Content-Type": f'multipart/related; boundary="{_BOUNDARY}"'},
        )
        return str(json.loads(reply)["generation"])

    def _renew_loop(self) -> None:
        try:
            while not self._stop.wait(self._ttl / 3) and self._lost is None and self._renew():
                pass
        except BaseException as e:  # noqa: BLE001 - the thread never dies silently
            self._lose(f"its renewal failed: {type(e).__name__}: {e}")

    def _renew(self) -> bool:
        """One renewal, retried until shortly before expiry; False once the lease is lost."""
        try:
            paths.retry(
                self._renew_once,
                f"renewing the workdir lease {self.url}",
                deadline=time.monotonic() + (self.safe_until - clock()),
            )
            return True
        except FileExistsError:
            self._lose("another run took it over")
        except StorageError:
            self._lose(f"storage did not answer for {self._ttl * 5 / 6:.0f} s of renewals")
        except Exception as e:  # noqa: BLE001 - 403 and the like: not retried, not hidden
            self._lose(f"its renewal failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        return False

    def _renew_once(self) -> None:
        """Renews under our generation; a 412 whose object holds our token means our
        previous attempt landed and only its reply was lost."""
        sent = clock()
        try:
            self._generation = self._upload(if_generation=self._generation)
        except FileExistsError:
            held = self._read()
            if held is None or held[0].get("token") != self._token:
                raise
            _, self._generation, age = held
            sent = clock() - max(age, 0.0)
        self._valid_until = sent + self._ttl

    def _lose(self, reason: str) -> None:
        """Records why the lease is lost; check() (or the fence) says it, in one line."""
        if self._lost is None:
            self._lost = reason

    @property
    def safe_until(self) -> float:
        """The clock() time until which this holder is sure it holds the lease: the newest
        renewal's send time + TTL, less TTL/6 for requests in flight."""
        return self._valid_until - self._ttl / 6

    @property
    def filesystem(self) -> "gcsfs.GCSFileSystem":
        """The filesystem the lease's own requests go through (never fenced)."""
        return self._fs

    def lost(self) -> str | None:
        """Why this holder can no longer be sure it holds the lease, or None."""
        if self._lost is None and clock() > self.safe_until:
            self._lose(f"not renewed for {self._ttl * 5 / 6:.0f} s; another run may take it")
        return self._lost

    def check(self) -> None:
        """Raises LeaseLostError if the lease was lost or is near expiry unrenewed, so the
        run writes nothing more."""
        if self.lost():
            raise LeaseLostError(
                f"The workdir lease {self.url} was lost ({self._lost}); this run writes "
                "nothing more to the workdir. Rerun when the other run is gone or storage "
                "answers: training resumes from the newest complete checkpoint."
            )

    def release(self) -> None:
        """Stops renewing and deletes the lease if it is still ours (best effort: a lease
        left behind expires after TTL, or at once for a rerun in this container).

        Call it only once nothing of this run can write any more (fence.py)."""
        self._stop.set()
        self._renewer.join(timeout=max(self.safe_until - clock(), 0.0))
        if self.lost() or self._renewer.is_alive():
            return
        try:
            paths.retry(
                lambda: self._call(
                    "DELETE",
                    "b/{}/o/{}",
                    self._bucket,
                    self._key,
                    ifGenerationMatch=self._generation,
                ),
                f"releasing the workdir lease {self.url}",
                deadline=time.monotonic() + min(self.safe_until - clock(), self._ttl / 3),
            )
        except (FileExistsError, FileNotFoundError):
            pass
        except StorageError as e:
            log.warning("%s It expires %.0f s after its last renewal.", e, self._ttl)
