"""Writes scalar metrics to WORKDIR/metrics.jsonl and to TensorBoard event files.

TensorBoard events are written through tensorboard's own event-file writer, so no
tensorflow is needed. Only the primary process writes.
"""

import json
import pathlib
import time

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class MetricsWriter:
    """Appends one JSON object per logged step and a TensorBoard scalar per metric."""

    def __init__(self, workdir: str, *, enabled: bool = True, subdir: str = "train"):
        self.enabled = enabled
        if not enabled:
            return
        root = pathlib.Path(workdir)
        self.jsonl_path = root / "metrics.jsonl"
        self._jsonl = open(self.jsonl_path, "a", encoding="utf-8")  # noqa: SIM115
        self._events = EventFileWriter(str(root / "tensorboard" / subdir))

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

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
            self._events.close()


def read_metrics(workdir: str, kind: str = "train") -> dict[int, dict]:
    """The newest record per step from metrics.jsonl (a resumed run re-logs some steps)."""
    records = {}
    path = pathlib.Path(workdir) / "metrics.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("kind") == kind:
            records[record["step"]] = record
    return records
