"""One console line per logged step: step, loss, accuracy, tokens/s, MFU and ETA."""

import datetime
import sys
import time


class ProgressLine:
    """Prints progress to stderr on the primary process."""

    def __init__(self, total_steps: int, *, enabled: bool = True, stream=None, prefix: str = ""):
        """prefix: what each line starts with (e.g. "seed 3: ", where runs share a console)."""
        self.total_steps = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.prefix = prefix
        self._start = time.time()

    def update(self, step: int, metrics: dict, throughput: dict) -> None:
        """Writes the line for `step`; the ETA assumes the last interval's step time. The
        accuracy and MFU show where the metrics and throughput have them."""
        if not self.enabled:
            return
        remaining = (self.total_steps - step) * throughput["step_time"]
        parts = [f"step {step}/{self.total_steps}", f"loss {float(metrics['loss']):.4f}"]
        if "accuracy" in metrics:
            parts.append(f"acc {float(metrics['accuracy']):.3f}")
        parts += [
            f"{throughput['tokens_per_sec']:,.0f} tok/s",
            f"{throughput['step_time'] * 1e3:.0f} ms/step",
        ]
        if "mfu" in throughput:
            parts.append(f"MFU {throughput['mfu']:.1%}")
        parts.append(f"ETA {datetime.timedelta(seconds=round(remaining))}")
        self.stream.write(self.prefix + " | ".join(parts) + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A one-off line (eval results, checkpoints, preemption)."""
        if self.enabled:
            self.stream.write(self.prefix + text + "\n")
            self.stream.flush()
