"""Split brain on gs://: run A is cut off from storage during a checkpoint save for longer
than the workdir lease's TTL; run B takes the workdir over through a healthy path and
trains to the end. A sends no write after its outage starts and exits with the storage exit
code in one line; B's final checkpoint and every logged loss equal an uninterrupted run's,
bit for bit.

A and B reach one emulator through two fault proxies (tests/split_storage.py): A's holds
the outage, B's none. A's proxy notes when it forwarded each request, so "A wrote nothing"
is counted where the writes would land, not inferred from A's own log.
"""

import pathlib
import subprocess
import sys
import time

from tests import gcs_emulator
from tests import train_harness as harness
from tests.gcs_faults import Fault
from tests.split_storage import MUTATING, clients_at, two_paths
from xlnet_jax import paths
from xlnet_jax.errors import STORAGE_EXIT_CODE
from xlnet_jax.run.lease import TTL_ENV
from xlnet_jax.training.metrics import read_metrics

BUCKET = "xlnet-split-brain"
WORKDIR = f"gs://{BUCKET}/run"
TTL_S = 10  # A counts its lease lost at most 5/6 of this after its last renewal
OUTAGE_S = 20  # longer than the TTL, and still on while B takes over
RETRY = "first_delay_s=0.2,max_delay_s=1,budget_s=60"


def _train(proxy_url: str, cwd, name: str, slow: float = 0.0) -> subprocess.Popen:
    """`xlnet-jax train` on WORKDIR through `proxy_url`; its output goes to cwd/NAME.log."""
    env = harness.environment(
        **gcs_emulator.environment(proxy_url),
        **{paths.RETRY_ENV: RETRY, TTL_ENV: str(TTL_S), paths.CACHE_ENV: str(cwd / name)},
    )
    command = harness.train_command(WORKDIR, "--config.checkpoint_every=3")
    if slow:
        command = [sys.executable, str(harness.SLOW_STEPS), str(slow), *command[3:]]
    log = open(cwd / f"{name}.log", "w+")  # noqa: SIM115 - read back by _output
    process = subprocess.Popen(
        command, env=env, cwd=harness.REPO, stdout=log, stderr=subprocess.STDOUT
    )
    process.log = log
    return process


def _output(process: subprocess.Popen) -> str:
    process.log.seek(0)
    return process.log.read()


def _until(condition, timeout: float, what: str, *alive: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for process in alive:
            assert process.poll() is None, f"ended early:\n{_output(process)[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_run_cut_off_past_its_lease_writes_nothing_more_and_the_taker_is_bit_exact(tmp_path):
    runs = []
    with two_paths(BUCKET) as (upstream, proxy_a, proxy_b):
        try:
            _split_brain(tmp_path, proxy_a, proxy_b, runs)
        finally:
            for run in runs:
                if run.poll() is None:
                    run.kill()
                    run.wait(timeout=60)
        reference = harness.reference_run()
        with clients_at(upstream):
            got = {step: r["loss"] for step, r in read_metrics(WORKDIR).items()}
            final = harness.checkpoint_arrays(WORKDIR, 12)
    want = {step: r["loss"] for step, r in read_metrics(str(reference)).items()}
    assert got == want  # all 12 steps, A's 1-3 and B's 4-12
    harness.assert_trees_equal(final, harness.checkpoint_arrays(reference, 12))


def _split_brain(cwd: pathlib.Path, proxy_a, proxy_b, runs: list) -> None:
    """A to its outage inside the save of step 6, B over the top; checks A's writes and
    both runs' ends."""
    # A's first write that names step 6's files starts the outage, inside that save.
    outage = proxy_a.add(
        Fault("outage", outage_s=OUTAGE_S, times=1, classes=("write", "chunk"),
              match="run/checkpoints/6/")
    )  # fmt: skip
    run_a = _train(proxy_a.url, cwd, "a", slow=0.2)
    runs.append(run_a)
    _until(lambda: outage.times == 0, 300, "A's save of step 6", run_a)
    cut_off = proxy_a._outage_until - OUTAGE_S
    # B starts once A's lease is stale by any rule (unrenewed for a TTL).
    time.sleep(max(0.0, cut_off + TTL_S + 1 - time.monotonic()))
    run_b = _train(proxy_b.url, cwd, "b")
    runs.append(run_b)
    run_b.wait(timeout=400)
    output_b = _output(run_b)
    assert run_b.returncode == 0, output_b[-3000:]
    assert "Took over the stale workdir lease" in output_b, output_b[-3000:]
    assert "Resumed from step 3" in output_b, output_b[-3000:]
    # A's storage comes back; whatever A still had queued would be sent now.
    _until(lambda: not proxy_a.in_outage(), OUTAGE_S + 60, "the end of A's outage")
    time.sleep(2)
    run_a.wait(timeout=120)
    output_a = _output(run_a)
    late = [(round(t - cut_off, 1), m, u) for t, m, u in proxy_a.forwarded if t >= cut_off]
    writes = [w for w in late if w[1] in MUTATING]
    assert not writes, f"{len(writes)} write(s) of A reached storage: {writes[:6]}"
    assert run_a.returncode == STORAGE_EXIT_CODE, output_a[-3000:]
    last = output_a.strip().splitlines()[-1]
    assert last.startswith("xlnet-jax train: error: The workdir lease gs://"), last
    assert "was lost" in last and "writes nothing more" in last
    assert proxy_a.injected("outage") >= 1 and proxy_b.injected() == 0
