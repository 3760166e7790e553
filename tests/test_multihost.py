"""Multi-host: 2 processes x 2 CPU devices under jax.distributed, launched through the pod
launcher's local backend, train, checkpoint and resume like a single process.

The single-process reference is the session's 1-device run: the 4-device mesh gives the
same numbers within float32 rounding (tests/test_sharding_invariance.py shows that)."""

import shutil
import subprocess
import sys

from tests import train_harness as harness
from tests.helpers import assert_same_training


def _launch(workdir) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "xlnet_jax.launch.pod", "train", "--backend", "local",
        "--num-processes", "2", "--num-cpu-devices", "2", "--timeout", "500",
        "--config", harness.CONFIG, "--workdir", str(workdir),
        f"--config.corpus_dir={harness.corpus_dir()}",
    ]  # fmt: skip
    return subprocess.run(
        command, env=harness.environment(), cwd=harness.REPO, capture_output=True, text=True
    )


def test_two_processes_match_one_process_and_resume(tmp_path):
    single = harness.reference_run()
    want = harness.losses(single)

    multi = tmp_path / "multi"
    first = _launch(multi)
    assert first.returncode == 0, first.stdout + first.stderr
    got = harness.losses(multi)
    assert sorted(got) == list(range(1, 13))
    assert_same_training(
        [got[s] for s in range(1, 13)],
        [want[s] for s in range(1, 13)],
        harness.final_params(multi),
        harness.final_params(single),
        harness.checkpoint_arrays(multi, 12)["mems"],
        harness.checkpoint_arrays(single, 12)["mems"],
    )

    # Resume both processes from step 6: they redo steps 7-12 exactly.
    shutil.rmtree(multi / "checkpoints" / "12")
    second = _launch(multi)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Resumed from step 6" in (multi / "logs" / "process_0.log").read_text()
    resumed = harness.losses(multi)
    assert [resumed[s] for s in range(7, 13)] == [got[s] for s in range(7, 13)]
