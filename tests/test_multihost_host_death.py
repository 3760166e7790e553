"""Host death under jax.distributed, 2 processes x 1 CPU device, no shared watcher: each
process is started on its own, as on a pod's hosts.

Three cases, side by side: a peer SIGKILLed, the coordinator (process 0) SIGKILLed, a peer
hung (SIGSTOP). The survivor exits by itself within the heartbeat timeout plus a bound,
with exit code 5 (not an abort), and its last words are one line naming the lost process,
with no traceback or C++ stack before it. Started again, the job whose process hung (the
case that leaves the most behind: a stopped process still holding its files) resumes and
ends bit for bit where an uninterrupted run ends. A killed trainer's relaunch is
tests/test_multihost_restart.py's case, there through the launcher on a gs:// workdir.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import train_harness as harness
from xlnet_jax.launch import commands, local
from xlnet_jax.launch.supervise import PEER_LOST_EXIT_CODE
from xlnet_jax.training.metrics import read_metrics

HEARTBEAT = 10  # seconds
BOUND = 60  # seconds past the heartbeat timeout, generous for a loaded machine
STEPS = ("--config.num_train_steps=8", "--config.checkpoint_every=2")
RELAUNCHED = "peer_hung"
# case: (the process that is lost, the signal, the survivor)
CASES = {
    "peer_killed": (1, signal.SIGKILL, 0),
    "coordinator_killed": (0, signal.SIGKILL, 1),
    "peer_hung": (1, signal.SIGSTOP, 0),
}


def _start(workdir: Path, slow: float = 0.0) -> list[subprocess.Popen]:
    """The 2 processes of a job on `workdir`; process i's stderr goes to WORKDIR.err{i}."""
    program = [sys.executable, str(harness.SLOW_STEPS), str(slow)] if slow else [
        sys.executable, "-m", "xlnet_jax.cli"
    ]  # fmt: skip
    argvs = commands.local_train(
        program, local.free_port(), 2, 1, harness.CONFIG, str(workdir),
        [f"--config.corpus_dir={harness.corpus_dir()}", *STEPS],
    )  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [*argv, f"--heartbeat_timeout={HEARTBEAT}"],
            env=harness.environment(),
            cwd=harness.REPO,
            stdout=subprocess.DEVNULL,
            stderr=open(f"{workdir}.err{i}", "ab"),  # noqa: SIM115 - closed with the process
        )
        for i, argv in enumerate(argvs)
    ]


def _stderr(workdir: Path, i: int) -> str:
    return Path(f"{workdir}.err{i}").read_text(errors="replace")


def _trainer_of(supervisor: int) -> int:
    """The pid of the trainer that `xlnet-jax train` (its supervising parent) runs."""
    tasks = Path(f"/proc/{supervisor}/task")
    children = [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]
    assert len(children) == 1, children
    return children[0]


def _losses(workdir: Path) -> dict[int, float]:
    return {step: r["loss"] for step, r in read_metrics(str(workdir)).items()}


def test_survivors_exit_in_one_line_and_a_relaunch_is_bit_exact(tmp_path):
    straight = tmp_path / "straight"
    uninterrupted = _start(straight)  # first: the others find its compiled step in the cache
    deadline = time.time() + 900
    while "step 1/" not in _stderr(straight, 0):
        assert uninterrupted[0].poll() is None and time.time() < deadline, _stderr(straight, 0)
        time.sleep(0.1)
    jobs = {case: _start(tmp_path / case, slow=0.3) for case in CASES}
    waiting = set(CASES)
    lost_at = {}
    while waiting:  # each case loses its process once its step 2 is saved
        for case in sorted(waiting):
            assert all(p.poll() is None for p in jobs[case]), _stderr(tmp_path / case, 0)[-3000:]
            if harness.checkpoint_done(tmp_path / case, 2):
                lost, sig, _ = CASES[case]
                supervisor = jobs[case][lost]
                for pid in (_trainer_of(supervisor.pid), supervisor.pid):
                    os.kill(pid, sig)
                lost_at[case] = time.monotonic()
                waiting.discard(case)
        assert time.time() < deadline, "no job reached step 2"
        time.sleep(0.01)

    seconds, endings = {}, {}
    while len(seconds) < len(CASES):  # each survivor's exit, timed on its own
        for case, (_, _, survivor) in CASES.items():
            if case not in seconds and jobs[case][survivor].poll() is not None:
                seconds[case] = time.monotonic() - lost_at[case]
        assert time.monotonic() - max(lost_at.values()) < HEARTBEAT + BOUND + 60, seconds
        time.sleep(0.05)
    for case, (lost, _, survivor) in CASES.items():
        code = jobs[case][survivor].wait()
        jobs[case][lost].kill()  # the hung one too: its job starts again below
        jobs[case][lost].wait()
        endings[case] = code, _stderr(tmp_path / case, survivor)
    print("survivors' exit after the loss:", {c: f"{s:.1f} s" for c, s in seconds.items()})
    for case, (lost, _, _) in CASES.items():
        code, said = endings[case]
        assert code == PEER_LOST_EXIT_CODE, f"{case}: exit code {code}\n{said[-3000:]}"
        assert seconds[case] < HEARTBEAT + BOUND, f"{case}: took {seconds[case]:.0f} s"
        last = said.strip().splitlines()[-1]
        assert last.startswith(f"xlnet-jax train: error: the job lost process {lost}"), last
        assert "Traceback" not in said and "Check failure" not in said, said[-3000:]

    assert [p.wait(timeout=900) for p in uninterrupted] == [0, 0], _stderr(straight, 0)[-3000:]
    relaunched = tmp_path / RELAUNCHED
    assert [p.wait(timeout=900) for p in _start(relaunched)] == [0, 0], _stderr(relaunched, 0)
    want = _losses(straight)
    assert sorted(want) == list(range(1, 9))
    assert "Resumed from step" in _stderr(relaunched, 0)
    assert _losses(relaunched) == want
    harness.assert_trees_equal(harness.final_params(relaunched), harness.final_params(straight))
