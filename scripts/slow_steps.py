"""`xlnet-jax` with every train step slowed by SECONDS, for kill and preemption tests.

    python scripts/slow_steps.py SECONDS train --config ... --workdir ...
    python scripts/slow_steps.py SECONDS finetune --config ... --workdir ...

Signals and kills sent from outside (tests/, scripts/fault_injection.py) then land at the
steps they aim for. The delay wraps the compiled train step (pretraining) or the reading
of each step's batch (fine-tuning) from outside the package, so the production loops carry
no test hook.
"""

import sys
import time

from xlnet_jax import cli
from xlnet_jax.finetune import batches
from xlnet_jax.training import program


def _slowed(compile_train_step, seconds: float):
    """Program.compile_train_step whose step sleeps `seconds` after each call."""

    def compile_slow_step(self):
        step = compile_train_step(self)

        def slow_step(state, batch):
            outputs = step(state, batch)
            time.sleep(seconds)
            return outputs

        return slow_step

    return compile_slow_step


def _slow_batches(train_batch, seconds: float):
    """batches.train_batch that sleeps `seconds` before each fine-tuning step's batch."""

    def slow_batch(*args, **kwargs):
        time.sleep(seconds)
        return train_batch(*args, **kwargs)

    return slow_batch


if __name__ == "__main__":
    seconds = float(sys.argv[1])
    program.Program.compile_train_step = _slowed(program.Program.compile_train_step, seconds)
    batches.train_batch = _slow_batches(batches.train_batch, seconds)
    sys.argv = [sys.argv[0], *sys.argv[2:]]  # config_flags reads the overrides from sys.argv
    cli.run()
