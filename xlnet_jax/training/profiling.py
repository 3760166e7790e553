"""A profiler trace of chosen training steps, for TensorBoard's profile plugin and Perfetto.

`xlnet-jax train --profile_steps=START:END` traces steps START+1 .. END (the optimizer steps
that bring the run from step START to END) into WORKDIR/profile/: an .xplane.pb that
TensorBoard's profile plugin opens and a .trace.json.gz that ui.perfetto.dev opens. The
profiler writes local files only, so a gs:// workdir's trace goes to this host's cache
directory instead (the log names it).
"""

import logging
import os

import jax

from xlnet_jax import paths
from xlnet_jax.errors import UsageError


def parse_steps(spec: str) -> tuple[int, int] | None:
    """'START:END' -> (START, END) with 0 <= START < END; '' -> None (no profiling)."""
    if not spec:
        return None
    start, sep, end = spec.partition(":")
    if sep and start.isdigit() and end.isdigit() and int(start) < int(end):
        return int(start), int(end)
    raise UsageError(
        f"--profile_steps={spec!r}: expected START:END with 0 <= START < END, e.g. 10:15 "
        "(traces the steps after step 10 up to step 15)"
    )


class StepProfiler:
    """Starts a jax.profiler trace at step START and stops it once step END is done."""

    def __init__(self, spec: str, workdir: str):
        self.steps = parse_steps(spec)
        self.tracing = False
        if paths.is_remote(workdir):
            self.directory = paths.local_cache("profile")
        else:
            self.directory = os.path.join(paths.as_path(workdir), "profile")

    def before_step(self, step: int) -> None:
        """Called with the step about to run (the state's step count before it)."""
        if self.steps and step == self.steps[0] and not self.tracing:
            jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
            self.tracing = True

    def after_step(self, done: int, outputs) -> None:
        """Called with the step count after a step and that step's outputs."""
        if self.tracing and done >= self.steps[1]:
            jax.block_until_ready(outputs)
            self.stop()
            logging.info("Profile of steps %d:%d written to %s", *self.steps, self.directory)

    def stop(self) -> None:
        """Ends the trace if one is running (also when the run stops early)."""
        if self.tracing:
            jax.profiler.stop_trace()
            self.tracing = False
