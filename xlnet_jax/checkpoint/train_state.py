"""The train state: everything a step reads and writes, and everything a checkpoint holds."""

from typing import Any

import flax.struct
import jax


@flax.struct.dataclass
class TrainState:
    """Params, optimiser state and the recurrence memory, advanced together by each step.

    Attributes:
      step: int32 scalar, the number of optimiser steps taken.
      params: model parameters (float32).
      opt_state: optax state.
      mems: float32 [n_layer, batch, mem_len, d_model]: each layer's input over the reuse
        blocks of the previous steps, the true left context of the next batch's rows.
      rng: uint32 key data; the step's randomness is fold_in(rng, step), so a resumed run
        samples exactly what an uninterrupted one would.
      skipped_steps: int32 scalar, steps whose update was skipped for a non-finite value.
    """

    step: jax.Array
    params: Any
    opt_state: Any
    mems: jax.Array
    rng: jax.Array
    skipped_steps: jax.Array
