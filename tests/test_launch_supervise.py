"""The supervising parent of a multi-process trainer (xlnet_jax/launch/supervise.py) and the
restart policy (restarts.py), with stand-in children that end as jax's survivors do."""

import signal
import sys
from pathlib import Path

import pytest

from xlnet_jax.errors import STOPPED_EXIT_CODE, STORAGE_EXIT_CODE
from xlnet_jax.launch import restarts, supervise

# What a survivor printed here (jax 0.10.2) when its peer, process 1, was SIGKILLed.
PEER_KILLED = """\
Traceback (most recent call last):
  File "train.py", line 11, in <module>
ValueError: UNKNOWN: Gloo all-reduce failed: [pair.cc:538] Read error: Connection reset by peer
E1125 15:06:35.472592    8691 coordination_service.cc:1549] Use error polling to propagate \
the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy (stopped \
sending heartbeats):
1
The tasks have crashed.
F1125 15:06:35.472904    8702 client.h:80] Terminating process because the JAX distributed \
service detected fatal errors.
*** Check failure stack trace: ***
    @     0x7f478ae40634  absl::lts_20260107::log_internal::LogMessage::SendToLog()
"""
# ... and when the coordinator (process 0) was.
COORDINATOR_KILLED = """\
W1125 15:15:37.231248   22577 preemption_sync_manager.cc:147] Failed to retrieve preemption \
notice from coordination service: UNAVAILABLE: Socket closed
E1125 15:06:56.282931    9277 coordination_service_agent.cc:289] Polled an error from \
coordination service (this can be an error from this or another task).
F1125 15:06:56.282939    9277 client.h:80] Terminating process because the JAX distributed \
service detected fatal errors.
"""


def _child(tmp_path: Path, stderr_text: str, ending: str) -> list[str]:
    """A child that prints a progress line, then `stderr_text`, then ends by `ending`."""
    script = tmp_path / "child.py"
    (tmp_path / "said.txt").write_text(stderr_text)
    script.write_text(
        "import os, sys\n"
        "print('step 3/8 | loss 6.1', file=sys.stderr, flush=True)\n"
        f"sys.stderr.write(open({str(tmp_path / 'said.txt')!r}).read()); sys.stderr.flush()\n"
        f"{ending}\n"
    )
    return [sys.executable, str(script)]


# ... and another time, the coordinator's reset connection seen first.
COORDINATOR_RESET = """\
E1125 16:04:50.944078   26724 coordination_service_agent.cc:289] Polled an error from \
coordination service (this can be an error from this or another task).
F1125 16:04:50.944168   26724 client.h:80] Terminating process because the JAX distributed \
service detected fatal errors.
Additional GRPC error information from remote target coordination_service while calling \
/xla.coordination.CoordinationService/PollForError:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by peer"}
"""


@pytest.mark.parametrize(
    "text, who",
    [
        (PEER_KILLED, "process 1"),
        (COORDINATOR_KILLED, "process 0 (the coordinator)"),
        (COORDINATOR_RESET, "process 0 (the coordinator)"),
    ],
)
def test_an_abort_after_a_lost_peer_becomes_one_line_and_exit_code_5(tmp_path, capsys, text, who):
    code = supervise.run(_child(tmp_path, text, "os.abort()"), "train", process_id=1)
    assert code == supervise.PEER_LOST_EXIT_CODE
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0] == "step 3/8 | loss 6.1"  # passed through as it came
    assert len(lines) == 2 and lines[1].startswith(
        f"xlnet-jax train: error: the job lost {who}: it died, hung or its host went away; "
        "this process (process 1) stops too (exit code 5)."
    ), err
    kept = lines[1].rsplit("jax's messages: ", 1)[1]
    assert Path(kept).read_text() == text  # the internals are kept, not shown


def test_the_trainer_s_own_error_passes_through_with_its_code(tmp_path, capsys):
    text = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad field\n'
    assert supervise.run(_child(tmp_path, text, "sys.exit(3)"), "train") == 3
    assert capsys.readouterr().err == "step 3/8 | loss 6.1\n" + text


def test_a_killed_trainer_returns_128_plus_the_signal(tmp_path, capsys):
    ending = "import signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert supervise.run(_child(tmp_path, "", ending), "train") == 128 + signal.SIGKILL


def test_only_multi_process_commands_are_supervised(monkeypatch):
    class Flags(dict):
        __getattr__ = dict.__getitem__

    monkeypatch.delenv(supervise.SUPERVISED_ENV, raising=False)
    assert supervise.needed(Flags(coordinator_address="127.0.0.1:1", distributed=False))
    assert supervise.needed(Flags(coordinator_address=None, distributed=True))
    assert not supervise.needed(Flags(coordinator_address=None, distributed=False))
    assert not supervise.needed(Flags(config="c.py"))  # e.g. prepare: no cluster flags
    monkeypatch.setenv(supervise.SUPERVISED_ENV, "1")  # the child runs the command itself
    assert not supervise.needed(Flags(coordinator_address="127.0.0.1:1", distributed=False))


@pytest.mark.parametrize(
    "code, cause",
    [
        (STORAGE_EXIT_CODE, "object storage kept failing"),
        (supervise.PEER_LOST_EXIT_CODE, "the job lost a process"),
        (STOPPED_EXIT_CODE, "a trainer was stopped before its last step (a preemption notice?)"),
        (137, "a trainer was killed (SIGKILL)"),
        (134, "a trainer was killed (SIGABRT)"),
        (143, "a trainer was killed (SIGTERM)"),  # before the loop could save
        (0, None), (1, None), (2, None), (3, None),
        (130, None),  # SIGINT: someone asked it to stop
    ],
)  # fmt: skip
def test_the_restart_policy(code, cause):
    assert restarts.cause(code) == cause
    if cause:
        assert restarts.pause_s(code) > 0


def test_a_block_that_the_run_outlives_is_passed_on_in_order(tmp_path, capsys):
    text = (
        "E1125 15:42:43.701872     422 slow_operation_alarm.cc:73] \n"
        "[Compiling module jit_train_step for CPU] Very slow compile?\n"
        'Traceback (most recent call last):\n  File "x.py"\nOSError: retried\n'
        "2026-11-25 15:46:58,596 INFO Compiled the train step in 453.9 s\n"
        "step 4/8 | loss 6.0\n"
    )
    assert supervise.run(_child(tmp_path, text, "sys.exit(0)"), "train") == 0
    assert capsys.readouterr().err == "step 3/8 | loss 6.1\n" + text
