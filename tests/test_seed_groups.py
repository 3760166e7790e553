"""Seeds side by side (finetune --devices_per_seed): a seed that fails stops the other groups
at their next step, each saved, and its error is the one raised.

The fine-tuning loop is replaced by a stand-in that steps the way it does (asking the shared
watcher at every step boundary, saving and stopping when asked), so the test runs in
milliseconds; the real loop's stop is test_finetune_run's SIGTERM test of two seed groups.
"""

import threading
import time
import types

import pytest

from configs.finetune.cpu import get_config
from xlnet_jax.errors import DataError
from xlnet_jax.finetune import seeds
from xlnet_jax.training.preemption import StoppedBeforeEnd

STEPS = 100_000  # far more than the test lets a healthy seed reach


def test_a_failing_seed_stops_the_other_groups_at_their_next_step(monkeypatch):
    stopped: dict[int, int] = {}
    notes: list[str] = []
    failing_may_fail = threading.Event()

    def stand_in(run, path, *, preemption, prefix, **_):
        seed = run.config.seed
        for step in range(1, STEPS + 1):
            if seed == 1 and step == 3:
                failing_may_fail.wait(timeout=60)
                raise DataError("seed 1: a broken row")
            if step == 2:
                failing_may_fail.set()  # every healthy group is under way
            time.sleep(0.001)  # a healthy seed would take STEPS ms: minutes, not this test's ~1 s
            if preemption.requested(step):
                stopped[seed] = step
                preemption.stop(step, STEPS, lambda line: notes.append(prefix + line))
        return {"dev": {"accuracy": 1.0}}

    monkeypatch.setattr(seeds, "finetune", stand_in)
    config = get_config()
    config.batch_size = 8
    runs = {}
    for seed in range(3):
        run_config = config.copy_and_resolve_references()
        run_config.seed = seed
        runs[seed] = types.SimpleNamespace(config=run_config)
    with pytest.raises(DataError, match="seed 1: a broken row"):
        seeds._side_by_side(runs, lambda s: f"seed_{s}", False, devices_per_seed=2)
    assert sorted(stopped) == [0, 2] and max(stopped.values()) < STEPS, stopped
    assert all("another seed failed: saved step" in note for note in notes), notes


def test_a_stop_alone_is_not_taken_for_a_failure():
    future = seeds.concurrent.futures.Future()
    future.set_exception(StoppedBeforeEnd("stopped at step 4"))
    assert not seeds._failed(future)
