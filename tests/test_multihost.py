"""Multi-host: 2 processes x 2 CPU devices under jax.distributed, launched through the pod
launcher's local backend, train and checkpoint like a single process. (Resuming both
processes from a checkpoint is tests/test_multihost_restart.py's relaunch.)

The single-process reference is the session's 1-device run: the 4-device mesh gives the
same numbers within float32 rounding (tests/test_sharding_invariance.py shows that)."""

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


def test_two_processes_match_one_process(tmp_path):
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
