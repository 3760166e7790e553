"""The workdir lock on object storage: a lease object written under generation preconditions.

GCS has no flock and no process that could drop a lock when its holder dies, so the lock
is a lease, an object holding {holder, host, pid, token}:

- Taking it is a create-if-absent upload (`ifGenerationMatch=0`): of processes that try
  at once, exactly one succeeds; the others get HTTP 412.
- The holder renews it every TTL/3 with an upload conditioned on its own generation.
- A lease is stale when its last renewal (GCS's `updated` time) is older than TTL, or
  when its holder ran on this host and that process is gone (a run killed and restarted
  on the same VM resumes at once). A stale lease is taken over by an upload conditioned
  on the generation that was read stale, so of two takers exactly one wins.
- Release deletes it, conditioned on the holder's generation.

Under faults (paths.retry): a failed renewal is retried until shortly before the lease
would expire (TTL after the newest renewal was sent, less TTL/6); a renewal whose write
landed but whose reply was lost meets 412 on its retry, finds its own token in the object
and carries on. The holder counts itself lost once that time passes without a renewal, or
on any error it cannot retry, or when another run took the lease over: `check()` then
raises, whatever state the renewal thread is in. `safe_until` is that moment; a training
run fences every write of its own by it (fence.py).

What it guarantees: two live runs never both hold one lease: a taker needs the lease
unrenewed for TTL, and the holder stops counting on it TTL/6 before that. Staleness
compares GCS's clock with this host's: hosts need clocks within a few seconds of true
time, as on Google Cloud VMs.

The TTL is 90 s; $XLNET_JAX_LEASE_TTL sets another (seconds, e.g. 12 in the tests that hold
an outage longer than it).
"""

import datetime
import json
import logging
import math
import os
import socket
import threading
import time
import uuid

import gcsfs

from xlnet_jax import paths
from xlnet_jax.errors import ConfigError, LeaseLostError, StorageError, WorkdirError

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


_BOUNDARY = "xlnet-jax-lease"


class ObjectLease:
    """Holds the lease at `url` (gs://bucket/key) until release(), renewing it in a thread."""

    def __init__(self, url: str, ttl: float | None = None):
        self.url = url
        self._ttl = lease_ttl() if ttl is None else ttl
        ttl = self._ttl
        # A filesystem of its own, so that fence.py can tell the lease's requests (which
        # must go on while the run's other writes are fenced) from every other one.
        self._fs = gcsfs.GCSFileSystem(skip_instance_cache=True)
        self._bucket, self._key, _ = self._fs.split_path(url)
        self._token = uuid.uuid4().hex
        self._body = json.dumps(
            {
                "holder": "xlnet-jax",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "token": self._token,
            }  # fmt: skip
        ).encode()
        self._lost: str | None = None
        sent = time.monotonic()
        self._generation = paths.retry(self._acquire, f"taking the workdir lease {url}")
        self._valid_until = sent + ttl
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="lease")
        self._renewer.start()

    def _acquire(self) -> str:
        try:
            return self._upload(if_generation="0")
        except FileExistsError:
            pass
        held = self._read()
        if held is None:  # released between our attempt and the read
            return self._upload(if_generation="0")
        body, generation, age = held
        if body.get("token") == self._token:  # our create succeeded; its reply was lost
            return generation
        if not self._stale(body, age):
            raise WorkdirError(
                f"Another run holds the workdir lease {self.url} (host {body.get('host')}, pid "
                f"{body.get('pid')}, renewed {age:.0f} s ago; it expires {self._ttl:.0f} s after "
                "its last renewal). Stop that run or wait, or use a different --workdir."
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

    def _stale(self, body: dict, age: float) -> bool:
        if age > self._ttl:
            return True
        if body.get("host") != socket.gethostname() or not isinstance(body.get("pid"), int):
            return False
        try:
            os.kill(body["pid"], 0)
        except ProcessLookupError:
            return True  # its holder on this host is gone
        except PermissionError:
            return False
        return False

    def _read(self) -> tuple[dict, str, float] | None:
        """(body, generation, seconds since its last write), or None if there is none."""
        try:
            info = self._fs.info(self.url, refresh=True)
            body = json.loads(self._fs.cat_file(self.url, generation=info["generation"]))
        except FileNotFoundError:
            return None
        except (ValueError, OSError):
            body, info = {}, self._fs.info(self.url, refresh=True)
        updated = datetime.datetime.fromisoformat(info["updated"].replace("Z", "+00:00"))
        age = (datetime.datetime.now(datetime.UTC) - updated).total_seconds()
        return body if isinstance(body, dict) else {}, str(info["generation"]), age

    def _upload(self, if_generation: str) -> str:
        """Writes the lease body if the object's generation matches; its new generation.

        A multipart upload (JSON metadata + body), as gcsfs's own writes: the emulator
        honours preconditions on this upload type.
        """
        metadata = json.dumps({"name": self._key, "contentType": "application/json"})
        part = f"--{_BOUNDARY}\r\nContent-Type: application/json\r\n\r\n"
        body = f"{part}{metadata}\r\n{part}".encode() + self._body + f"\r\n--{_BOUNDARY}--".encode()
        reply = self._fs.call(
            "POST",
            f"{self._fs._location}/upload/storage/v1/b/{self._bucket}/o",
            uploadType="multipart",
            ifGenerationMatch=if_generation,
            data=body,
            headers={"Content-Type": f'multipart/related; boundary="{_BOUNDARY}"'},
            json_out=True,
        )
        return str(reply["generation"])

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
                deadline=self._valid_until - self._ttl / 6,
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
        sent = time.monotonic()
        try:
            self._generation = self._upload(if_generation=self._generation)
        except FileExistsError:
            held = self._read()
            if held is None or held[0].get("token") != self._token:
                raise
            _, self._generation, age = held
            sent = time.monotonic() - max(age, 0.0)
        self._valid_until = sent + self._ttl

    def _lose(self, reason: str) -> None:
        """Records why the lease is lost; check() (or the fence) says it, in one line."""
        if self._lost is None:
            self._lost = reason

    @property
    def safe_until(self) -> float:
        """The time.monotonic() until which this holder is sure it holds the lease: the
        newest renewal's send time + TTL, less TTL/6 for clock skew and requests in flight."""
        return self._valid_until - self._ttl / 6

    @property
    def filesystem(self) -> gcsfs.GCSFileSystem:
        """The filesystem the lease's own requests go through (never fenced)."""
        return self._fs

    def lost(self) -> str | None:
        """Why this holder can no longer be sure it holds the lease, or None."""
        if self._lost is None and time.monotonic() > self.safe_until:
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
        left behind expires after TTL, or at once for a rerun on this host)."""
        self._stop.set()
        self._renewer.join(timeout=self._ttl)
        if self._lost:
            return
        try:
            paths.retry(
                lambda: self._fs.call(
                    "DELETE",
                    "b/{}/o/{}",
                    self._bucket,
                    self._key,
                    ifGenerationMatch=self._generation,
                ),
                f"releasing the workdir lease {self.url}",
                deadline=time.monotonic() + self._ttl / 3,
            )
        except (FileExistsError, FileNotFoundError):
            pass
        except StorageError as e:
            log.warning("%s It expires %.0f s after its last renewal.", e, self._ttl)
