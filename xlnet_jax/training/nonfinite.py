"""config.nonfinite_policy applied at log time: warn of a skipped step, halt, or stop a streak.

The jitted steps (pretraining's and fine-tuning's) report which quantity of a step went
non-finite in its `nonfinite` metric and skip its update (steps.guard_update); the loop
(loop.py) hands each logged interval's records to the monitor before any checkpoint of
those steps is saved, so a stop leaves the newest checkpoint from before the bad step.
"""

import logging

from xlnet_jax.errors import NonFiniteError
from xlnet_jax.training import steps

log = logging.getLogger(__name__)


# Under nonfinite_policy='skip', this many skipped steps in a row stop the run: it is not
# learning (e.g. a restored state that itself holds NaN), and would only burn compute.
MAX_SKIPS_IN_A_ROW = 100

# A run whose first FIRST_STEPS steps are all non-finite stops after them, whatever
# log_every is: its config (or restored state) breaks the numerics from the start. A new
# run also stops, rather than save, if a checkpoint falls due before any step was finite:
# that checkpoint would hold the untrained model.
FIRST_STEPS = 10


class NonFiniteMonitor:
    """Applies config.nonfinite_policy to each step's `nonfinite` code, at log time."""

    def __init__(self, policy: str, start_step: int):
        self.policy = policy
        self.start_step = start_step
        self.in_a_row = 0
        self.any_finite = False

    def due(self, done: int) -> bool:
        """Whether the metrics must be fetched after step `done` for the first-steps check."""
        return not self.any_finite and done == self.start_step + FIRST_STEPS

    def check(
        self,
        records: list[dict],
        last_saved: int | None,
        save_due: bool = False,
        final: bool = False,
    ) -> None:
        """Warns about skipped steps; raises NonFiniteError under 'halt', on a long streak,
        when no step of this run was finite in its first FIRST_STEPS steps or (for a new
        run) before a save falls due, or (`final`: the run's last step) when its last
        FIRST_STEPS steps or more were all skipped: its end state would be a result of a run
        that stopped learning.

        Called before any checkpoint of these steps is saved, so a halt leaves the newest
        checkpoint from before the bad step.
        """
        for record in records:
            code = int(record["nonfinite"])
            if code == steps.FINITE:
                self.in_a_row = 0
                self.any_finite = True
                continue
            quantity, step = steps.NONFINITE_NAMES[code], record["step"]
            newest = f"step {last_saved}" if last_saved else "none yet"
            if self.policy == "halt":
                raise NonFiniteError(
                    f"Non-finite {quantity} at step {step} (nonfinite_policy=halt): its update "
                    f"was not applied and no later checkpoint was saved (newest: {newest}). "
                    "Lower config.learning_rate, or set config.nonfinite_policy=skip to skip "
                    "such steps."
                )
            self.in_a_row += 1
            log.warning(
                "Non-finite %s at step %d: update skipped (%d skipped in this run so far).",
                quantity,
                step,
                int(record["skipped_steps"]),
            )
            if self.in_a_row >= MAX_SKIPS_IN_A_ROW:
                raise NonFiniteError(
                    f"{self.in_a_row} steps in a row up to step {step} were skipped for a "
                    f"non-finite {quantity}: the run is not learning (newest checkpoint: "
                    f"{newest}). Lower config.learning_rate or resume from an earlier "
                    "checkpoint."
                )
        done = records[-1]["step"] - self.start_step
        if not self.any_finite and (done >= FIRST_STEPS or (save_due and not self.start_step)):
            raise NonFiniteError(self._never_finite(done, records[-1]))
        if final and self.in_a_row >= FIRST_STEPS:
            last = records[-1]["step"]
            quantity = steps.NONFINITE_NAMES[int(records[-1]["nonfinite"])]
            raise NonFiniteError(
                f"The last {self.in_a_row} steps of the run, up to step {last}, were skipped "
                f"for a non-finite {quantity}: it stopped learning, so its end is not saved "
                "or evaluated as a result. Lower config.learning_rate (or resume from an "
                "earlier checkpoint)."
            )

    def _never_finite(self, done: int, last: dict) -> str:
        """The error of a run none of whose steps so far was finite, naming likely causes."""
        quantity = steps.NONFINITE_NAMES[int(last["nonfinite"])]
        first = self.start_step + 1
        steps_done = f"step {first}" if done == 1 else f"steps {first}-{first + done - 1}"
        if self.start_step:
            cause = (
                f"the checkpoint of step {self.start_step} it resumed from holds non-finite "
                "values, or config.learning_rate is far too large for it; resume from an "
                "earlier checkpoint or lower the rate"
            )
        else:
            cause = (
                "the config breaks the numerics from the start: config.learning_rate (or "
                "weight_decay) far too large, or config.initializer_range or layer_norm_eps "
                "out of scale; no checkpoint of the untrained model was saved"
            )
        return (
            f"No step of this run was finite ({steps_done}, the last a non-finite {quantity}): "
            f"nothing was learned. Likely cause: {cause}."
        )
