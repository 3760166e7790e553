"""Every host reads only its share by default: 4 processes x 1 CPU device under
jax.distributed train from a gs:// corpus (tests/gcs_emulator.py) with the default
config.data_ranges, which the run resolves to 4 and records. Each stages and caches a
quarter of the corpus (its own XLNET_JAX_CACHE_DIR stands for its own disk), and the run
equals 1 process with 4 devices reading everything in the same 4 ranges (data_ranges=4,
pinned: its own default would be 1)."""

import sys

import pytest

from benchmarks.host_share import host_bytes
from tests import gcs_emulator
from tests import train_harness as harness
from tests.helpers import assert_same_training
from tests.sharded_corpus import sharded_corpus
from xlnet_jax import paths
from xlnet_jax.data import staging
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.launch import commands, local
from xlnet_jax.training import run_config

CORPUS = f"gs://{gcs_emulator.BUCKET}/sharded"
STEPS = 6  # one checkpoint (checkpoint_every=6): the comparison needs no more steps


@pytest.fixture(scope="module")
def gcs():
    """The emulator's URL, holding the 8-shard test corpus at CORPUS."""
    with gcs_emulator.running() as url, gcs_emulator.pointed_at(url):
        staging.publish(sharded_corpus(), CORPUS)
        yield url


def _launch(gcs_url, tmp_path, name: str, processes: int, devices: int, overrides=()) -> list[str]:
    """Trains in tmp_path/name with `processes` processes of `devices` devices, each with
    its own cache root; returns those roots."""
    port, roots, argvs = local.free_port(), [], []
    for i in range(processes):
        roots.append(str(tmp_path / f"{name}-host{i}"))
        env = harness.environment(
            **gcs_emulator.environment(gcs_url),
            **{paths.CACHE_ENV: roots[-1]},
        )
        flags = commands.local_cluster_flags(port, processes, i, devices)
        if processes == 1:
            flags = [f"--num_cpu_devices={devices}"]
        argvs.append(
            ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "xlnet_jax.cli",
             *commands.train_args(flags, harness.CONFIG, str(tmp_path / name),
                                  [f"--config.corpus_dir={CORPUS}",
                                   f"--config.num_train_steps={STEPS}", *overrides])]
        )  # fmt: skip
    code = local.run(argvs, tmp_path / f"{name}-logs", timeout=400)
    assert code == 0, (tmp_path / f"{name}-logs" / "process_0.log").read_text()[-3000:]
    return roots


def test_four_hosts_each_hold_a_quarter_and_train_as_one_process(gcs, tmp_path):
    pinned = ("--config.data_ranges=4",)  # one process's default would read 1 range
    one = _launch(gcs, tmp_path, "one", processes=1, devices=4, overrides=pinned)
    four = _launch(gcs, tmp_path, "four", processes=4, devices=1)  # the default data_ranges
    assert run_config.load(str(tmp_path / "four")).data_ranges == 4  # recorded for resumes

    # The same training: losses, params and memory.
    want, got = tmp_path / "one", tmp_path / "four"
    assert sorted(harness.losses(got)) == list(range(1, STEPS + 1))
    assert_same_training(
        [harness.losses(got)[s] for s in range(1, STEPS + 1)],
        [harness.losses(want)[s] for s in range(1, STEPS + 1)],
        harness.final_params(got),
        harness.final_params(want),
        harness.checkpoint_arrays(got, STEPS)["mems"],
        harness.checkpoint_arrays(want, STEPS)["mems"],
    )

    # The small files (tokenizer, dataset metadata, manifest) are on every host, whatever
    # the host count; the shards and caches, which grow with the corpus, are split 4 ways.
    manifest = load_manifest(sharded_corpus())
    train = [f["bytes"] for name, f in manifest.files.items() if "-train.array_record" in name]
    whole = host_bytes(one[0])
    assert whole["shards"] == sum(train)  # train only: the config does not evaluate
    corpus = whole["shards"] + whole["cached"]
    for root in four:
        held = host_bytes(root)
        assert held["small"] == whole["small"]
        share = held["shards"] + held["cached"]
        assert share <= 1.1 * corpus / 4 + max(train), (held, whole, max(train))
