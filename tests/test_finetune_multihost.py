"""Several hosts share one fine-tuning run: `launch run finetune --backend local` with 2
processes x 2 CPU devices ends as 1 process with 4 devices does (the same mesh, data 4),
even when one host is SIGKILLed mid-run and the launcher starts the job again.

The reference runs once for the module. The one multi-process scenario is 2 processes,
each step 2 s late (scripts/slow_steps.py), whose process 1 is SIGKILLed once step 2's
checkpoint is final; the launcher starts both again and they resume from step 2. Its
checkpoint arrays, losses, eval loss and logits equal the reference's within ROUNDINGS, its
labels, accuracy and integers exactly: across processes the 4 devices' gradients are summed
over Gloo, in another order than one process sums them (measured: at most 16 roundings of a
leaf's scale; 2 and 4 processes gave the same bits as each other). A host that read another
host's rows of a batch (two copies of one share, none of the other) trains on another
batch: its parameters then differ by ~8 x 10^5 roundings (measured by making process 1 read
process 0's rows). Each process also says in its log which rows it reads."""

import json
import os
import pathlib
import sys
import threading
import time
from unittest import mock

import numpy as np
import pytest

from tests import finetune_source
from tests.helpers import TRAINING_ROUNDINGS, assert_f32_close, assert_trees_f32_close
from tests.xla_flags import FAST_COMPILE
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.launch import pod

pytestmark = pytest.mark.usefixtures("committed_tree")
REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "finetune" / "cpu.py")
WORDS = "river mountain forest lake engine wheel motor gear the a is here and".split()
STEPS = 4
OVERRIDES = [
    "--config.seq_len=16",
    "--config.batch_size=8",
    f"--config.num_train_steps={STEPS}",
    "--config.warmup_steps=1",
    "--config.checkpoint_every=2",
    "--config.log_every=1",
    "--config.learning_rate=1e-3",
    "--config.clip_scope=global",
]
# The two runs' gradients sum over the 4 devices in another order (one process's all-reduce,
# two processes' over Gloo): each step's gradient differs by rounding, and Adam carries it on.
# helpers.TRAINING_ROUNDINGS bounds 12 such steps at each leaf's scale; these are 4.
ROUNDINGS = TRAINING_ROUNDINGS
STEP_DELAY_S = 2.0  # the kill after step 2's checkpoint lands before step 4 ends


@pytest.fixture(scope="module", autouse=True)
def environment():
    """The launched processes: this suite's quick compiles, and the test run's compilation
    cache (the relaunched job's compiles come from it, as a user's would)."""
    env = {"XLA_FLAGS": FAST_COMPILE, "PYTHONPATH": str(REPO)}
    with finetune_source.run_compilation_cache():
        with mock.patch.dict(os.environ, env):
            yield


def _sentences(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(3, 9))) for _ in range(count)]


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> list[str]:
    """`launch`'s finetune flags for a random 2 x 32 XLNet with a 40-piece tokenizer and a
    two-label task; dev has 12 examples, so its last batch of 8 is half padding (process
    1's rows of it hold none)."""
    rng = np.random.default_rng(0)
    source = tmp_path_factory.mktemp("source")
    shape = dict(d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64)
    finetune_source.write_source(source, _sentences(rng, 2000), 40, shape, scale=0.05)
    data = tmp_path_factory.mktemp("data")
    for split, count in (("train", 64), ("dev", 12)):
        lines = []
        for text in _sentences(rng, count):
            first = rng.choice(WORDS[:8])
            lines.append(f"{'land' if WORDS.index(first) < 4 else 'machine'}\t{first} {text}")
        (data / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return ["--task-name=classification", f"--data-dir={data}", f"--init-from={source}"]


def launch(workdir: pathlib.Path, task: list[str], *flags: str, delay: float = 0.0) -> int:
    """`launch run finetune --backend local` of `flags`, each step `delay` s late."""
    argv = ["run", "finetune", "--backend", "local", "--config", CONFIG,
            "--workdir", str(workdir), "--log-dir", f"{workdir}-logs", "--timeout", "600",
            "--restart-pause", "0", *flags, *task, *OVERRIDES]  # fmt: skip
    slow = [sys.executable, str(REPO / "scripts" / "slow_steps.py"), str(delay)]
    return pod.main(argv, local_program=slow)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, task) -> pathlib.Path:
    """One process with 4 CPU devices, uninterrupted."""
    workdir = tmp_path_factory.mktemp("runs") / "one-process"
    assert launch(workdir, task, "--num-cpu-devices", "4") == 0
    return workdir


def trainer_pid(workdir: pathlib.Path, process_id: int) -> int | None:
    """The pid of process `process_id`'s trainer: of the two processes with its argv (the
    supervising parent runs its own command again as a child), the child."""
    wanted = {f"--workdir={workdir}".encode(), f"--process_id={process_id}".encode()}
    parents = {}
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and wanted <= set((proc / "cmdline").read_bytes().split(b"\0")):
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(proc.name)] = int(stat[1])
        except OSError:  # it ended meanwhile
            continue
    children = [pid for pid, parent in parents.items() if parent in parents]
    return children[0] if children else None


def test_two_hosts_killed_and_relaunched_end_as_one_process(reference, task, tmp_path, capsys):
    workdir = tmp_path / "two-processes"
    codes = []
    flags = ["--num-processes", "2", "--num-cpu-devices", "2", "--max-restarts", "2"]
    launcher = threading.Thread(
        target=lambda: codes.append(launch(workdir, task, *flags, delay=STEP_DELAY_S))
    )
    launcher.start()
    final = workdir / "checkpoints" / "2" / "_CHECKPOINT_METADATA"
    deadline = time.monotonic() + 600
    while not final.exists():
        assert launcher.is_alive() and time.monotonic() < deadline, capsys.readouterr().err
        time.sleep(0.01)
    pid = trainer_pid(workdir, 1)
    assert pid is not None, "process 1 ended before step 3"
    os.kill(pid, 9)  # as the OOM killer would
    launcher.join(timeout=900)
    said = capsys.readouterr().err
    assert codes == [0], said
    assert "process 1 exited with code 137" in said and "(restart 1 of 2)" in said, said
    assert "(restart 2 of 2)" not in said, said
    for i in range(2):
        log = (tmp_path / "two-processes-logs" / f"process_{i}.log").read_text()
        rows = "0-3" if i == 0 else "4-7"
        assert f"process {i} of 2 reads rows {rows} of each batch of 8" in log, log
        assert "Resumed from step 2" in log, log

    assert_same_results(workdir, reference)


def assert_same_results(got: pathlib.Path, want: pathlib.Path) -> None:
    """The final checkpoint's arrays, the losses of each step, eval_results.json and the
    predictions agree to ROUNDINGS; integers (step, key), labels and accuracies exactly."""
    mine, theirs = read_checkpoint(str(got), STEPS), read_checkpoint(str(want), STEPS)
    assert mine["step"] == theirs["step"] == STEPS
    assert_trees_f32_close(mine["state"], theirs["state"], roundings=ROUNDINGS)
    losses = [_losses(run) for run in (got, want)]
    assert sorted(losses[0]) == sorted(losses[1]) == list(range(1, STEPS + 1))
    assert_f32_close([*losses[0].values()], [*losses[1].values()], roundings=ROUNDINGS)
    results = [json.loads((run / "eval_results.json").read_text()) for run in (got, want)]
    loss = [result["dev"].pop("loss") for result in results]
    assert_f32_close(loss[0], loss[1], roundings=ROUNDINGS, err_msg="dev loss")
    assert results[0] == results[1] and results[0]["step"] == STEPS
    predictions = [_predictions(run) for run in (got, want)]
    logits = [[record.pop("logits") for record in records] for records in predictions]
    assert predictions[0] == predictions[1] and len(predictions[0]) == 12
    assert_f32_close(logits[0], logits[1], roundings=ROUNDINGS, err_msg="dev logits")


def _losses(run: pathlib.Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def _predictions(run: pathlib.Path) -> list[dict]:
    lines = (run / "predictions" / "dev.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
