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

What it guarantees: two live runs never both hold one lease. What it does not: a holder
stalled (or cut off from GCS) for longer than TTL loses the lease to a new run; it learns
so at its next renewal, after which `check()` raises and the run stops before its next
save. Staleness compares GCS's clock with this host's: hosts need clocks within a few
seconds of true time, as on Google Cloud VMs.
"""

import datetime
import json
import logging
import os
import socket
import threading
import uuid

import gcsfs

from xlnet_jax.errors import WorkdirError

log = logging.getLogger(__name__)

TTL_SECONDS = 90.0
_BOUNDARY = "xlnet-jax-lease"


class ObjectLease:
    """Holds the lease at `url` (gs://bucket/key) until release(), renewing it in a thread."""

    def __init__(self, url: str, ttl: float = TTL_SECONDS):
        self.url, self._ttl = url, ttl
        self._fs = gcsfs.GCSFileSystem()
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
        self._generation = self._acquire()
        self._lost: str | None = None
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
        while not self._stop.wait(self._ttl / 3) and self._renew():
            pass

    def _renew(self) -> bool:
        """One renewal; False once the lease is lost (another run took it over)."""
        try:
            self._generation = self._upload(if_generation=self._generation)
        except FileExistsError:
            self._lost = "another run took it over"
            log.error("Lost the workdir lease %s: %s.", self.url, self._lost)
            return False
        except OSError as e:
            log.warning("Could not renew the workdir lease %s (%s); retrying.", self.url, e)
        return True

    def check(self) -> None:
        """Raises WorkdirError if the lease was lost, so the run stops before writing more."""
        if self._lost:
            raise WorkdirError(
                f"The workdir lease {self.url} was lost ({self._lost}); stopping before the "
                "next save. Rerun when the other run is gone: training resumes."
            )

    def release(self) -> None:
        """Stops renewing and deletes the lease if it is still ours."""
        self._stop.set()
        self._renewer.join()
        if self._lost:
            return
        try:
            self._fs.call(
                "DELETE", "b/{}/o/{}", self._bucket, self._key, ifGenerationMatch=self._generation
            )
        except (FileExistsError, FileNotFoundError):
            pass
