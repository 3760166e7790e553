"""Non-finite loss, gradient or update: the step skips its update and says so (policy skip),
or the run halts, naming the step and the quantity, with no checkpoint after it (halt).

The end-to-end runs resume from a checkpoint whose recurrence memory holds one NaN: the next
step's loss is NaN, and since a skipped step resets the memory, the run after it is finite
again. The check lives in the step (a `nonfinite` code fetched with the other metrics), so
the host never syncs on it between logs and saves.
"""

import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import train_harness as harness
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.training import nonfinite, steps
from xlnet_jax.training.metrics import read_metrics

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("loss", "grad_norm", "update_norm", "code"),
    [
        (1.0, 1.0, 1.0, steps.FINITE),
        (NAN, 1.0, 1.0, steps.NONFINITE_LOSS),
        (INF, NAN, INF, steps.NONFINITE_LOSS),  # the loss is named first
        (1.0, INF, 1.0, steps.NONFINITE_GRAD),
        (1.0, 1.0, INF, steps.NONFINITE_UPDATE),
    ],
)
def test_nonfinite_code_names_the_first_bad_quantity(loss, grad_norm, update_norm, code):
    assert int(steps.nonfinite_code(loss, grad_norm, update_norm)) == code


def tiny_state() -> TrainState:
    return TrainState(
        step=jnp.int32(3),
        params={"w": jnp.ones(2)},
        opt_state={"mu": jnp.zeros(2)},
        mems=jnp.ones((1, 1, 2, 2)),
        rng=jnp.zeros(2, jnp.uint32),
        skipped_steps=jnp.int32(1),
    )


def test_guard_update_skips_a_nonfinite_gradient():
    state = tiny_state()
    new = {"params": {"w": jnp.full(2, NAN)}, "opt_state": {"mu": jnp.full(2, INF)}}
    skipped = steps.guard_update(
        state, jnp.int32(steps.NONFINITE_GRAD), mems=jnp.full((1, 1, 2, 2), NAN), **new
    )
    np.testing.assert_array_equal(skipped.params["w"], state.params["w"])
    np.testing.assert_array_equal(skipped.opt_state["mu"], state.opt_state["mu"])
    np.testing.assert_array_equal(skipped.mems, 0.0)  # the memory may hold the bad values
    assert int(skipped.step) == 4 and int(skipped.skipped_steps) == 2

    good = {"params": {"w": jnp.full(2, 2.0)}, "opt_state": {"mu": jnp.full(2, 0.5)}}
    applied = steps.guard_update(
        state, jnp.int32(steps.FINITE), mems=jnp.full((1, 1, 2, 2), 3.0), **good
    )
    np.testing.assert_array_equal(applied.params["w"], 2.0)
    np.testing.assert_array_equal(applied.mems, 3.0)
    assert int(applied.step) == 4 and int(applied.skipped_steps) == 1


def record(step: int, code: int, skipped: int = 0) -> dict:
    return {"step": step, "nonfinite": np.int32(code), "skipped_steps": np.int32(skipped)}


def test_monitor_halt_names_step_quantity_and_newest_checkpoint():
    monitor = nonfinite.NonFiniteMonitor("halt", 0)
    monitor.check([record(5, steps.FINITE)], last_saved=4)
    with pytest.raises(nonfinite.NonFiniteError) as info:
        monitor.check([record(6, steps.FINITE), record(7, steps.NONFINITE_UPDATE, 1)], 6)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("Non-finite update at step 7 (nonfinite_policy=halt)")
    assert "newest: step 6" in message


def test_monitor_skip_warns_and_stops_a_run_that_only_skips(caplog):
    monitor = nonfinite.NonFiniteMonitor("skip", 0)
    monitor.check([record(1, steps.NONFINITE_GRAD, 1), record(2, steps.FINITE, 1)], None)
    assert "Non-finite gradient at step 1: update skipped (1 skipped" in caplog.text
    streak = [
        record(step, steps.NONFINITE_LOSS, step)
        for step in range(3, 3 + nonfinite.MAX_SKIPS_IN_A_ROW)
    ]
    monitor.check(streak[:-1], None)
    with pytest.raises(
        nonfinite.NonFiniteError, match=r"steps in a row up to step \d+ were skipped"
    ):
        monitor.check(streak[-1:], None)


def test_monitor_stops_a_run_none_of_whose_first_steps_is_finite():
    monitor = nonfinite.NonFiniteMonitor("skip", 0)
    first = [record(step, steps.NONFINITE_UPDATE, step) for step in range(1, nonfinite.FIRST_STEPS)]
    monitor.check(first, None)
    assert monitor.due(nonfinite.FIRST_STEPS)
    with pytest.raises(nonfinite.NonFiniteError) as info:
        monitor.check([record(nonfinite.FIRST_STEPS, steps.NONFINITE_UPDATE, 10)], None)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"No step of this run was finite (steps 1-{nonfinite.FIRST_STEPS}, the last a non-finite "
        "update): nothing was learned. Likely cause: the config breaks the numerics"
    )
    assert "config.learning_rate" in message and "no checkpoint of the untrained" in message


def test_monitor_lets_a_run_go_on_once_a_step_was_finite():
    monitor = nonfinite.NonFiniteMonitor("skip", 0)
    monitor.check([record(1, steps.NONFINITE_LOSS, 1), record(2, steps.FINITE, 1)], None)
    assert not monitor.due(nonfinite.FIRST_STEPS)
    late = [
        record(step, steps.NONFINITE_LOSS, step) for step in range(3, 3 + nonfinite.FIRST_STEPS)
    ]
    monitor.check(late, None, save_due=True)


def test_monitor_a_new_run_stops_rather_than_save_an_untrained_model():
    new = nonfinite.NonFiniteMonitor("skip", 0)
    with pytest.raises(
        nonfinite.NonFiniteError, match=r"\(steps 1-2, the last a non-finite loss\)"
    ):
        new.check(
            [record(1, steps.NONFINITE_LOSS, 1), record(2, steps.NONFINITE_LOSS, 2)], None, True
        )
    resumed = nonfinite.NonFiniteMonitor("skip", 6)  # its state was trained: saving it is harmless
    resumed.check([record(7, steps.NONFINITE_LOSS, 1)], 6, save_due=True)
    with pytest.raises(nonfinite.NonFiniteError, match="checkpoint of step 6 it resumed from"):
        resumed.check([record(s, steps.NONFINITE_LOSS, s) for s in range(8, 17)], 6)


def test_cli_run_that_never_steps_finitely_stops_at_the_first_steps_with_no_checkpoint(tmp_path):
    """A rate of 1e30 passes validation (finite, > 0); every update overflows to inf and is
    skipped. log_every=50 would first look at step 50: the guard looks at step 10."""
    workdir = tmp_path / "run"
    result = harness.run_to_failure(
        workdir,
        "--config.learning_rate=1e30",
        "--config.warmup_steps=0",
        "--config.log_every=50",
        "--config.checkpoint_every=50",
        "--config.num_train_steps=100",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"xlnet-jax train: error: No step of this run was finite (steps 1-{nonfinite.FIRST_STEPS}, "
        "the last a non-finite update)"
    ), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not list((workdir / "checkpoints").glob("*"))
    records = read_metrics(str(workdir))
    assert sorted(records) == list(range(1, nonfinite.FIRST_STEPS + 1))
    assert all(r["nonfinite"] == steps.NONFINITE_UPDATE for r in records.values())


def poisoned_run(target) -> str:
    """A copy of the reference run cut back to step 6, whose saved memory holds one NaN."""
    workdir = harness.copy_run(harness.reference_run(), target)
    for step in (8, 10, 12):
        shutil.rmtree(workdir / "checkpoints" / str(step))
    config, fingerprint, abstract = harness.restore_setup()
    checkpointer = Checkpointer(str(workdir), config)
    state = checkpointer.restore(abstract, config, fingerprint)
    checkpointer.close()
    assert int(state.step) == 6
    shutil.rmtree(workdir / "checkpoints" / "6")
    mems = np.array(jax.device_get(state.mems))
    mems[0, 0, 0, 0] = np.nan
    checkpointer = Checkpointer(str(workdir), config)
    checkpointer.save(state.replace(mems=jnp.asarray(mems)), make_meta(config, fingerprint, 6))
    checkpointer.close()
    return workdir


def test_halt_stops_at_the_bad_step_without_saving_it(tmp_path):
    """log_every=4 would fetch step 7's metrics only at step 8: the due save fetches first."""
    workdir = poisoned_run(tmp_path / "run")
    result = harness.run_to_failure(
        workdir,
        "--config.nonfinite_policy=halt",
        "--config.checkpoint_every=1",
        "--config.log_every=4",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "xlnet-jax train: error:" in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "Non-finite loss at step 7 (nonfinite_policy=halt)" in errors[0]
    assert "newest: step 6" in errors[0]
    assert "Traceback" not in result.stderr
    names = sorted(p.name for p in (workdir / "checkpoints").iterdir())
    # Step 6 complete, nothing of step 7, not even an unfinished write.
    assert "6" in names and not any(name.startswith("7") for name in names), names


def test_skip_skips_the_bad_step_counts_it_and_recovers(tmp_path):
    workdir = poisoned_run(tmp_path / "run")
    harness.run(workdir, "--config.checkpoint_every=1", "--config.keep_checkpoints=10")
    assert "Non-finite loss at step 7: update skipped (1 skipped" in harness.log_tail(workdir)
    records = read_metrics(str(workdir))
    assert records[7]["nonfinite"] == steps.NONFINITE_LOSS and math.isnan(records[7]["loss"])
    for step in range(8, 13):
        assert records[step]["nonfinite"] == steps.FINITE and math.isfinite(records[step]["loss"])
        assert records[step]["skipped_steps"] == 1
    before, after = read_checkpoint(str(workdir), 6), read_checkpoint(str(workdir), 7)
    harness.assert_trees_equal(after["state"]["params"], before["state"]["params"])
    harness.assert_trees_equal(after["state"]["opt_state"], before["state"]["opt_state"])
    np.testing.assert_array_equal(after["mems"], 0.0)
    assert int(after["state"]["skipped_steps"]) == 1 and int(after["state"]["step"]) == 7
    final = read_checkpoint(str(workdir), 12)["state"]
    assert int(final["skipped_steps"]) == 1
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(final["params"]))


def test_monitor_a_streak_up_to_the_last_step_stops_the_run_before_its_end_is_kept():
    """Under 'skip', a run whose last FIRST_STEPS steps were all skipped does not end as a
    result (fine-tuning would evaluate its stale state); a shorter streak at the end does."""
    streak = [
        record(step, steps.NONFINITE_LOSS, step) for step in range(2, 2 + nonfinite.FIRST_STEPS)
    ]
    short = nonfinite.NonFiniteMonitor("skip", 0)
    short.check([record(1, steps.FINITE, 0), *streak[:-1]], None, save_due=True, final=True)
    full = nonfinite.NonFiniteMonitor("skip", 0)
    with pytest.raises(
        nonfinite.NonFiniteError, match=r"The last 10 steps of the run, up to step 11"
    ):
        full.check([record(1, steps.FINITE, 0), *streak], None, save_due=True, final=True)
