"""A dependency-free progress line on stderr for the preparation phases.

On a terminal it redraws one line at most five times a second; when stderr is a file or a
pipe it writes a plain line every 30 seconds, so logs stay short.
"""

import sys
import time


class Progress:
    """Counts work done in one phase and shows `label: done/total unit (pct) rate/s`."""

    def __init__(self, label: str, total: int, unit: str):
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self.start = self._last = time.perf_counter()
        self._tty = sys.stderr.isatty()

    def update(self, n: int) -> None:
        """Adds n units of work and redraws when due."""
        self.done += n
        now = time.perf_counter()
        if now - self._last >= (0.2 if self._tty else 30.0):
            self._last = now
            self._draw(end="\r" if self._tty else "\n")

    def close(self) -> float:
        """Draws the final state on its own line; returns the phase's seconds."""
        self._draw(end="\n")
        return time.perf_counter() - self.start

    def _draw(self, end: str) -> None:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        count = _human(self.done)
        if self.total:
            count += f"/{_human(self.total)} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            count += f" {self.unit}"
        line = f"{self.label}: {count}, {_human(self.done / elapsed)} {self.unit}/s"
        sys.stderr.write(line.ljust(79) + end)
        sys.stderr.flush()


def _human(x: float) -> str:
    """12345678 -> '12.3M'."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.1f}{suffix}"
    return f"{x:.0f}"
