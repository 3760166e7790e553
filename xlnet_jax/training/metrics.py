"""Writes scalar metrics to WORKDIR/metrics.jsonl and to TensorBoard event files.

TensorBoard events are written through tensorboard's own event-file writer, so no
tensorflow is needed. Only the primary process writes.

Object storage cannot append, so for a gs:// workdir both sinks are written to a local
mirror (seeded with the workdir's metrics.jsonl) and each file is uploaded whole after
every write, by a thread of its own: training never waits on storage. An upload that
fails is retried from the mirror at the next write or after a backoff (paths.RetryPolicy),
so nothing is dropped; close() uploads once more, within the policy's budget, and if
storage still fails it says so in one line and keeps the mirror.

A killed host loses its mirror, and a resumed run logs again only the steps past its
checkpoint; so before each checkpoint save the loop waits (sync(), at most
config.metrics_wait_s) for the records so far to be uploaded, and a checkpoint saved while
storage answers never outruns its metrics.
"""

import json
import logging
import os
import pathlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from xlnet_jax import paths
from xlnet_jax.config import BY_NAME

log = logging.getLogger(__name__)


class MetricsWriter:
    """Appends one JSON object per logged step and a TensorBoard scalar per metric.

    Training and `xlnet-jax eval` write to the same TensorBoard run ("train"), so the
    held-out curve is one series whichever wrote its points.
    """

    def __init__(
        self,
        workdir: str,
        *,
        enabled: bool = True,
        drop: Callable[[dict], bool] | None = None,
        sync_wait_s: float = BY_NAME["metrics_wait_s"].default,
    ):
        """Opens the sinks; `drop` first removes the records of metrics.jsonl it matches;
        sync() waits at most `sync_wait_s` (config.metrics_wait_s) for an upload.

        A resumed run drops the records past its checkpoint, which it logs again, so each
        step is in the file once. Only the run that holds the workdir lock may drop.
        """
        self.enabled = enabled
        if not enabled:
            return
        self._remote = paths.as_path(workdir) if paths.is_remote(workdir) else None
        root = pathlib.Path(tempfile.mkdtemp(prefix="xlnet-metrics-") if self._remote else workdir)
        self.jsonl_path = root / "metrics.jsonl"
        if self._remote:
            remote_jsonl = self._remote / "metrics.jsonl"
            try:
                seed = paths.retry(remote_jsonl.read_bytes, f"reading {remote_jsonl}")
                self.jsonl_path.write_bytes(seed)
            except FileNotFoundError:
                pass
        _end_torn_line(self.jsonl_path)
        self._root = root
        if drop is not None:
            _drop_records(self.jsonl_path, drop)
        self._jsonl = open(self.jsonl_path, "a", encoding="utf-8")  # noqa: SIM115
        self._events = EventFileWriter(str(root / "tensorboard" / "train"))
        self._uploader = _Uploader(root, self._remote, sync_wait_s) if self._remote else None

    def write(self, step: int, scalars: dict[str, float], *, kind: str = "train") -> None:
        """Records `scalars` at `step` in both sinks and flushes, so a kill loses nothing."""
        if not self.enabled:
            return
        record = {"step": step, "kind": kind, "time": time.time(), **scalars}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        values = [
            summary_pb2.Summary.Value(tag=f"{kind}/{name}", simple_value=float(value))
            for name, value in scalars.items()
        ]
        event = event_pb2.Event(
            wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values)
        )
        self._events.add_event(event)
        self._events.flush()
        if self._uploader is not None:
            self._uploader.request()

    def sync(self) -> None:
        """Waits, at most metrics_wait_s, until everything written so far is uploaded; if
        storage fails that long it says so in one line (the mirror keeps the records)."""
        if self.enabled and self._uploader is not None:
            self._uploader.sync()

    def close(self) -> None:
        """Flushes and closes both sinks; a gs:// workdir gets its last upload, and its local
        mirror is removed once that succeeded."""
        if self.enabled:
            self._jsonl.close()
            self._events.close()
            if self._uploader is not None and self._uploader.close():
                shutil.rmtree(self._root, ignore_errors=True)


class _Uploader:
    """Copies a local mirror's files whole to a gs:// directory, in a thread of its own."""

    def __init__(self, root: pathlib.Path, remote, sync_wait_s: float):
        self._root, self._remote, self._sync_wait_s = root, remote, sync_wait_s
        self._policy = paths.retry_policy()
        self._wanted, self._closed = threading.Event(), threading.Event()
        # Uploads are counted: `_requested` when asked for, `_uploaded` once one that began
        # after that request has succeeded.
        self._requested = self._uploaded = 0
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="metrics-upload")
        self._thread.start()

    def request(self) -> None:
        """Asks for an upload of everything written so far; returns at once."""
        with self._progress:
            self._requested += 1
        self._wanted.set()

    def sync(self) -> None:
        """Waits until an upload that began after the last request succeeded, at most
        sync_wait_s; then a warning line, and training goes on."""
        wait = self._sync_wait_s
        with self._progress:
            wanted = self._requested
            self._wanted.set()  # an upload waiting out its backoff starts now
            if self._progress.wait_for(lambda: self._uploaded >= wanted, wait):
                return
        log.warning(
            "The metrics were not uploaded to %s within %g s; they stay in %s and are "
            "uploaded when storage answers.",
            self._remote,
            wait,
            self._root,
        )

    def _run(self) -> None:
        failures = 0
        while not self._closed.is_set():
            self._wanted.wait(self._policy.delay(failures) if failures else None)
            if self._closed.is_set():
                return
            self._wanted.clear()
            with self._progress:
                covers = self._requested
            try:
                self._copy()
            except Exception as e:  # noqa: BLE001 - kept in the mirror, retried later
                if not failures:
                    log.warning(
                        "Could not upload the metrics to %s (%s); they stay in %s and are "
                        "uploaded again shortly.",
                        self._remote,
                        str(e).splitlines()[0] if str(e) else type(e).__name__,
                        self._root,
                    )
                failures += 1
                continue
            if failures:
                log.info("Metrics uploaded to %s again.", self._remote)
            failures = 0
            with self._progress:
                self._uploaded = covers
                self._progress.notify_all()

    def _copy(self) -> None:
        for directory, _, names in os.walk(self._root):
            for name in names:
                local = os.path.join(directory, name)
                target = self._remote / os.path.relpath(local, self._root)
                target.write_bytes(pathlib.Path(local).read_bytes())

    def close(self) -> bool:
        """Stops the thread and uploads once more within the retry budget; whether it did."""
        self._closed.set()
        self._wanted.set()
        self._thread.join(timeout=1)  # an upload in flight finishes on its own
        try:
            paths.retry(self._copy, f"uploading the metrics to {self._remote}")
            return True
        except Exception as e:  # noqa: BLE001 - one line; the mirror keeps everything
            log.error(
                "%s The metrics stay in %s; copy them to %s by hand.",
                str(e).splitlines()[0],
                self._root,
                self._remote,
            )
            return False


def _end_torn_line(path: pathlib.Path) -> None:
    """Ends a last line that a kill cut short, so the next record starts on its own line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, 2)
        if f.read(1) != b"\n":
            f.write(b"\n")


def _drop_records(path: pathlib.Path, drop: Callable[[dict], bool]) -> None:
    """Rewrites `path` (atomically) without the records `drop` matches and torn lines."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not (isinstance(record, dict) and drop(record)):
            kept.append(line + "\n")
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)


def read_metrics(workdir: str, kind: str = "train") -> dict[int, dict]:
    """The newest record per step from metrics.jsonl (a resumed run re-logs some steps).

    A line that is not a JSON object is a record cut short by a kill (or a full disk): it
    is skipped with a warning, since the step it held is re-logged after the resume.
    """
    records, torn = {}, 0
    path = paths.as_path(workdir) / "metrics.jsonl"
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        if isinstance(record, dict) and record.get("kind") == kind:
            records[record["step"]] = record
    if torn:
        log.warning("Skipped %d torn line(s) in %s (a run was killed while writing).", torn, path)
    return records
