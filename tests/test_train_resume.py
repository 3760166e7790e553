"""Exact resume: SIGKILL, SIGTERM and Ctrl-C mid-run, then resume, reproduce an
uninterrupted run bit for bit, recurrence memory included."""

import json
import logging
import pathlib
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import train_harness as harness
from tests.sharded_corpus import sharded_corpus
from tests.train_config import get_config
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.streams import StreamBatcher
from xlnet_jax.errors import STOPPED_EXIT_CODE, ConfigError
from xlnet_jax.model.xlnet import XLNetLM
from xlnet_jax.training import evaluate, run_config, steps


@pytest.fixture(scope="module")
def straight():
    """The session's uninterrupted 12-step run (checkpoints at 4, 6, 8, 10, 12)."""
    return harness.reference_run()


def test_profile_steps_leave_a_trace_for_tensorboard_and_perfetto(straight, tmp_path):
    traces = straight / "profile" / "plugins" / "profile"
    assert len(list(traces.glob("*/*.xplane.pb"))) == 1, harness.log_tail(straight)
    assert len(list(traces.glob("*/*.trace.json.gz"))) == 1
    bad = harness.run_to_failure(tmp_path / "bad", "--profile_steps=10")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--profile_steps='10': expected START:END with 0 <= START < END, e.g. 10:15 "
            "(traces the steps after step 10 up to step 15)"
        )
    )
    assert not (tmp_path / "bad").exists()


@pytest.fixture(scope="module")
def ranged_straight(tmp_path_factory):
    """An uninterrupted run of the 8-shard corpus read in 4 ranges (config.data_ranges)."""
    workdir = tmp_path_factory.mktemp("ranged") / "straight"
    harness.run(workdir, *ranged_run())
    assert list((pathlib.Path(sharded_corpus()) / "cache").glob("*-train-3of4-tokens.npy"))
    return workdir


def ranged_run() -> tuple[str, ...]:
    """The overrides of a run on the 8-shard test corpus read in 4 ranges."""
    return ("--config.data_ranges=4", f"--config.corpus_dir={sharded_corpus()}")


@pytest.mark.parametrize("layout", ["whole", "ranged"])
def test_sigkill_after_checkpoint_then_resume_is_bit_exact(layout, request, tmp_path):
    """Also with the split read in ranges: each row's range and place in it come from the
    corpus, seed and config alone, so the resumed run reads what the killed one would."""
    straight = request.getfixturevalue("straight" if layout == "whole" else "ranged_straight")
    overrides = ranged_run() if layout == "ranged" else ()
    workdir = tmp_path / "killed"
    process = harness.start(workdir, *overrides, step_delay=0.5)
    harness.wait_for(lambda: harness.checkpoint_done(workdir, 6), process, workdir)
    assert harness.kill(process) == -signal.SIGKILL
    assert not harness.checkpoint_done(workdir, 12)
    # The memory restored at step 6 is the memory the uninterrupted run had at step 6.
    np.testing.assert_array_equal(
        harness.checkpoint_arrays(workdir, 6)["mems"],
        harness.checkpoint_arrays(straight, 6)["mems"],
    )

    harness.run(workdir, *overrides)
    want, got = harness.losses(straight), harness.losses(workdir)
    # Steps the killed run logged past its checkpoint were replaced, not appended to.
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "train"] == list(range(1, 13))
    for step in range(7, 13):
        assert got[step] == want[step], f"step {step}: {got[step]!r} != {want[step]!r}"
    harness.assert_trees_equal(harness.final_params(workdir), harness.final_params(straight))
    harness.assert_trees_equal(
        harness.checkpoint_arrays(workdir, 12), harness.checkpoint_arrays(straight, 12)
    )


# The Pallas kernel (interpret mode on this CPU) with the harness config's dropatt 0.1.
KERNEL_RUN = ("--config.attention_impl=pallas", "--config.num_train_steps=6")


def test_sigkill_then_resume_is_bit_exact_through_the_kernel_with_dropout(tmp_path):
    """The kernel's dropout mask is a function of (seed, step): a resumed run drops what the
    uninterrupted one dropped, bit for bit."""
    assert get_config().dropatt > 0
    straight = tmp_path / "straight"
    harness.run(straight, *KERNEL_RUN, "--config.checkpoint_every=2")
    killed = tmp_path / "killed"
    process = harness.start(killed, *KERNEL_RUN, "--config.checkpoint_every=2", step_delay=0.5)
    harness.wait_for(lambda: harness.checkpoint_done(killed, 2), process, killed)
    assert harness.kill(process) == -signal.SIGKILL
    assert not harness.checkpoint_done(killed, 6)

    harness.run(killed, *KERNEL_RUN, "--config.checkpoint_every=2")
    assert "Resumed from step" in harness.log_tail(killed)
    want, got = harness.losses(straight), harness.losses(killed)
    assert [got[s] for s in range(1, 7)] == [want[s] for s in range(1, 7)]
    harness.assert_trees_equal(
        harness.checkpoint_arrays(killed, 6), harness.checkpoint_arrays(straight, 6)
    )


@pytest.mark.parametrize(
    ("sig", "status", "name"),
    [(signal.SIGTERM, STOPPED_EXIT_CODE, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")],
)
def test_signal_saves_stops_and_the_rerun_continues_bit_exact(
    straight, tmp_path, sig, status, name
):
    """SIGTERM (exit 6: stopped before the last step, never taken for done) and Ctrl-C (exit
    130, as a shell reports it) save, then resume."""
    workdir = tmp_path / "preempted"
    process = harness.start(workdir, step_delay=0.5)
    harness.wait_for(lambda: 3 in harness.losses(workdir), process, workdir)
    assert harness.kill(process, sig) == status, harness.log_tail(workdir)
    saved = max(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert 3 <= saved < 12
    assert max(harness.losses(workdir)) == saved  # every finished step was logged
    log = harness.log_tail(workdir)
    assert f"{name}: saved step {saved} and stopped; rerun the same command to continue." in log
    assert "Traceback" not in log

    harness.run(workdir)
    log = harness.log_tail(workdir)
    assert f"Resumed from step {saved}" in log
    want, got = harness.losses(straight), harness.losses(workdir)
    assert [got[s] for s in range(1, 13)] == [want[s] for s in range(1, 13)]
    harness.assert_trees_equal(harness.final_params(workdir), harness.final_params(straight))


def test_a_second_ctrl_c_aborts_at_once_in_one_line(tmp_path):
    workdir = tmp_path / "aborted"
    process = harness.start(workdir, step_delay=2.0)
    harness.wait_for(lambda: 1 in harness.losses(workdir), process, workdir)
    process.send_signal(signal.SIGINT)
    harness.wait_for(lambda: "Ctrl-C again" in harness.log_tail(workdir), process, workdir)
    assert harness.kill(process, signal.SIGINT) == 130
    log = harness.log_tail(workdir)
    assert log.rstrip().endswith("Second Ctrl-C: aborted without saving this step."), log
    assert "Traceback" not in log
    assert not (workdir / "checkpoints").exists() or not any(
        p.name.isdigit() for p in (workdir / "checkpoints").iterdir()
    )


def test_carried_memory_changes_the_loss(straight):
    """The memory is real context: the step-12 batch scores differently without it."""
    config = get_config()
    config.corpus_dir = harness.corpus_dir()
    arrays = harness.checkpoint_arrays(straight, 12)
    params, mems = arrays["state"]["params"], jnp.asarray(arrays["mems"])
    assert float(jnp.abs(mems).max()) > 0
    batcher = StreamBatcher(
        config.corpus_dir, "train", seq_len=config.seq_len, reuse_len=config.reuse_len,
        global_batch=config.batch_size, bi_data=config.bi_data, seed=config.seed,
    )  # fmt: skip
    batch = jax.tree.map(jnp.asarray, batcher.batch(12))
    model = XLNetLM(ModelConfig.from_config(config))
    key = jax.random.PRNGKey(0)
    with_memory = steps.eval_step(params, mems, batch, key, model=model, config=config)[1]
    without = steps.eval_step(params, jnp.zeros_like(mems), batch, key, model=model, config=config)[
        1
    ]
    loss_with, loss_without = (float(t[0] / t[1]) for t in (with_memory, without))
    # After 12 steps the model leans on its memory only a little, but far above float32
    # rounding (~1e-7 here): the memory is attended to and changes the prediction.
    assert abs(loss_with - loss_without) > 1e-5, (loss_with, loss_without)


def test_resume_on_another_device_count_keeps_the_memory(straight, tmp_path):
    """A checkpoint made on 1 device resumes on 2 devices, memory included."""
    workdir = harness.copy_run(straight, tmp_path / "moved")
    harness.run(workdir, "--config.num_train_steps=13", "--change_schedule", devices=2)
    log = harness.log_tail(workdir)
    assert "Resumed from step 12" in log and "memory restarts" not in log
    # The reference run checkpointed every 2 steps; the harness's config says 6.
    assert (
        "changed since step 12: num_train_steps 12 → 13, checkpoint_every 2 → 6; the "
        "learning rate at step 12 goes from 3e-06 to"
    ) in log
    assert np.isfinite(harness.losses(workdir)[13])


def test_a_new_global_batch_restores_all_but_the_memory(straight, tmp_path, caplog):
    workdir = harness.copy_run(straight, tmp_path / "rebatched")
    config, fingerprint, abstract = harness.restore_setup(batch_size=16)
    checkpointer = Checkpointer(str(workdir), config)
    with caplog.at_level(logging.WARNING):
        state = checkpointer.restore(abstract, config, fingerprint)
    checkpointer.close()
    assert int(state.step) == 12 and state.mems is None
    assert "(batch_size 8 -> 16): the recurrence memory restarts from zeros" in caplog.text
    harness.assert_trees_equal(state.params, harness.final_params(straight))


def test_metrics_reach_tensorboard_jsonl_and_the_console(straight):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(straight / "tensorboard" / "train"))
    events.Reload()
    for tag in ("loss", "accuracy", "grad_norm", "learning_rate", "tokens_per_sec", "mfu"):
        assert f"train/{tag}" in events.Tags()["scalars"]
    board = {e.step: e.value for e in events.Scalars("train/loss")}
    jsonl = harness.losses(straight)
    assert sorted(board) == sorted(jsonl) == list(range(1, 13))
    # TensorBoard stores float32; metrics.jsonl the same float32 value as a Python float.
    assert [board[s] for s in range(1, 13)] == [np.float32(jsonl[s]) for s in range(1, 13)]
    progress = [line for line in harness.log_tail(straight).splitlines() if line.startswith("step")]
    assert progress[-1].startswith("step 12/12 | loss ") and "tok/s" in progress[-1]
    assert "ETA" in progress[-1]


def test_a_finished_run_says_so_without_compiling(straight, tmp_path):
    """A rerun with no --config uses WORKDIR/config.json and finds nothing left to do."""
    workdir = harness.copy_run(straight, tmp_path / "finished")
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "train", "--workdir", str(workdir)],
        env=harness.environment(), capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "already complete at step 12; raise --config.num_train_steps" in done.stderr
    assert "Compiled" not in done.stderr


def test_a_rerun_lists_changes_refuses_architecture_and_asks_before_moving_the_schedule():
    saved, config = get_config(), get_config()
    config.batch_size = 16
    assert run_config.check_rerun(saved, config, 6, change_schedule=False) == (
        "changed since step 6: batch_size 8 → 16"
    )
    config.n_layer = 3
    with pytest.raises(
        ConfigError, match=r"^config.n_layer: cannot change when resuming at step 6"
    ):
        run_config.check_rerun(saved, config, 6, change_schedule=True)
    config.n_layer, config.num_train_steps = saved.n_layer, 24
    # Step 6 of 12 (warmup 3) decays from 3e-3 to 3e-6: 3e-3 - 3 * (3e-3 - 3e-6) / 9; of 24,
    # 3e-3 - 3 * (3e-3 - 3e-6) / 21.
    with pytest.raises(ConfigError, match=r"^config.num_train_steps: .* from 0.002001 to 0.002572"):
        run_config.check_rerun(saved, config, 6, change_schedule=False)
    line = run_config.check_rerun(saved, config, 6, change_schedule=True)
    assert line == (
        "changed since step 6: batch_size 8 → 16, num_train_steps 12 → 24; "
        "the learning rate at step 6 goes from 0.002001 to 0.002572"
    )


def test_eval_is_recorded_once_in_the_training_tensorboard_run(straight, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    workdir = harness.copy_run(straight, tmp_path / "evaluated")
    config = get_config()
    config.corpus_dir = harness.corpus_dir()
    result = evaluate.evaluate_workdir(config, str(workdir))
    # What was measured: eval_steps batches of batch_size rows, reuse_len new tokens each.
    assert (result["rows"], result["tokens"]) == (4 * 8, 4 * 8 * 16)
    assert 0 < result["targets"] <= result["rows"] * config.num_predict
    assert 0 < result["loss_stderr"] < result["loss"]
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], row["loss"]) for row in rows if row["kind"] == "eval"] == [
        (12, result["loss"])
    ]
    assert sorted(p.name for p in (workdir / "tensorboard").iterdir()) == ["train"]
    events = EventAccumulator(str(workdir / "tensorboard" / "train"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/loss")] == [12]
