"""The one loop (training/loop.py) with a stand-in program of seconds: the guarantees it gives
every program, pretraining's and fine-tuning's alike, checked once on the engine itself.

The stand-in's step adds its batch to one parameter vector (a pure function of the step, as
the real programs' batches are), so a resumed run must end bit for bit where an
uninterrupted one does; a batch can be made non-finite at a chosen step. The real programs
through their commands: test_train_resume.py, test_nonfinite.py, test_finetune_run.py.
"""

import contextlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.config import default_config
from xlnet_jax.errors import NonFiniteError
from xlnet_jax.training import loop, sharding, steps
from xlnet_jax.training.preemption import Preemption, StoppedBeforeEnd

WIDTH = 4


class StandIn:
    """A LoopProgram whose step is w += batch; `bad_at` makes that step's batch NaN;
    `compiles` False fails the test if the loop compiles the step."""

    def __init__(self, config, *, bad_at=None, compiles=True):
        self.config = config
        self.mesh = sharding.make_mesh(config)
        self.replicated = NamedSharding(self.mesh, P())
        self.bad_at, self.compiles = bad_at, compiles
        self.fingerprint = "stand-in"
        self.tokens_per_step, self.flops_per_device = 8, 0.0
        self.abstract_state = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated),
            jax.eval_shape(self._fresh),
        )
        self.finished = None

    def _fresh(self) -> TrainState:
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params={"w": jnp.zeros(WIDTH)},
            opt_state={"count": jnp.zeros((), jnp.int32)},
            mems=jnp.zeros((1,)),
            rng=jnp.zeros((2,), jnp.uint32),
            skipped_steps=jnp.zeros((), jnp.int32),
        )

    def activate(self):
        return contextlib.nullcontext()

    def start_state(self, restored):
        if restored is not None:
            return restored
        return jax.device_put(self._fresh(), self.replicated)

    def on_start(self, workdir: str) -> None:
        pass

    def compile_train_step(self):
        assert self.compiles, "a finished run compiled its step"

        def step(state, batch):
            new = state.params["w"] + batch["x"]
            loss = jnp.sum(new)
            code = steps.nonfinite_code(loss, jnp.zeros(()), jnp.zeros(()))
            nxt = steps.guard_update(
                state, code, params={"w": new}, opt_state=state.opt_state, mems=state.mems
            )
            return nxt, {"loss": loss, "nonfinite": code, "skipped_steps": nxt.skipped_steps}

        return jax.jit(step, donate_argnums=0)

    def host_batch(self, step: int) -> dict:
        x = np.random.default_rng(step).standard_normal(WIDTH).astype(np.float32)
        if step + 1 == self.bad_at:
            x[:] = np.nan
        return {"x": x}

    def put_batch(self, host_batch):
        return jax.device_put(host_batch, self.replicated)

    def counters(self, done: int) -> dict:
        return {}

    def eval_due(self, done: int) -> bool:
        return done % 3 == 0

    def evaluate(self, params, beat):
        return {"": {"norm": float(jnp.linalg.norm(params["w"]))}}

    def redone(self, record: dict, start_step: int) -> bool:
        return record.get("step", 0) > start_step

    def finish(self, state, run):
        self.finished = (run.start_step, np.asarray(state.params["w"]))
        return state


def _config(**fields):
    config = default_config()
    config.update(num_train_steps=6, log_every=1, checkpoint_every=2, keep_checkpoints=10)
    config.update(**fields)
    return config


def _records(workdir) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").open()]


def test_a_stopped_run_resumes_bit_for_bit_and_logs_each_step_once(tmp_path):
    straight = StandIn(_config())
    loop.run(straight, str(tmp_path / "straight"))
    assert straight.finished[0] == 0

    workdir = tmp_path / "stopped"
    preemption = Preemption()

    class Stopping(StandIn):
        def put_batch(self, host_batch):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls == 3:  # during step 3: it is saved, and the run stops
                preemption.request("a test's stop")
            return super().put_batch(host_batch)

    try:
        with pytest.raises(StoppedBeforeEnd, match="stopped at step 3"):
            loop.run(Stopping(_config()), str(workdir), preemption=preemption)
    finally:
        preemption.restore()
    assert (workdir / "checkpoints" / "3").exists()
    resumed = StandIn(_config())
    loop.run(resumed, str(workdir))
    assert resumed.finished[0] == 3
    np.testing.assert_array_equal(resumed.finished[1], straight.finished[1])  # bit for bit
    train = [r["step"] for r in _records(workdir) if r.get("kind", "train") == "train"]
    assert train == [1, 2, 3, 4, 5, 6]
    evals = [r["step"] for r in _records(workdir) if r.get("kind") == "eval"]
    assert evals == [3, 6]


def test_a_finished_run_finishes_again_without_compiling(tmp_path):
    loop.run(StandIn(_config()), str(tmp_path))
    again = StandIn(_config(), compiles=False)
    loop.run(again, str(tmp_path))
    assert again.finished[0] == 6


def test_halt_stops_before_the_bad_step_is_saved_and_the_end_is_never_reached(tmp_path):
    program = StandIn(_config(nonfinite_policy="halt"), bad_at=4)
    with pytest.raises(
        NonFiniteError, match=r"Non-finite loss at step 4 \(nonfinite_policy=halt\)"
    ):
        loop.run(program, str(tmp_path))
    assert program.finished is None  # finish (fine-tuning's final evaluation) never ran
    saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [2]


def test_skip_steps_past_a_bad_batch_and_counts_it(tmp_path):
    program = StandIn(_config(), bad_at=4)
    loop.run(program, str(tmp_path))
    records = {r["step"]: r for r in _records(tmp_path) if r.get("kind", "train") == "train"}
    assert records[4]["nonfinite"] == steps.NONFINITE_LOSS and records[6]["skipped_steps"] == 1
    assert np.isfinite(program.finished[1]).all()


def test_the_lease_is_released_at_the_end(tmp_path):
    """A second run in the workdir starts at once: the first one's lock is gone."""
    loop.run(StandIn(_config()), str(tmp_path))
    loop.run(StandIn(_config(num_train_steps=8)), str(tmp_path))
