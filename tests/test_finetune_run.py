"""`xlnet-jax finetune` end to end on a tiny model: outputs, a bit-exact rerun after SIGKILL
or SIGTERM (a real process), export to HF's class with the same logits, one-line errors,
and the long-text path through the memory."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import finetune_source
from xlnet_jax import cli
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.tokenizer import train_tokenizer
from xlnet_jax.errors import STOPPED_EXIT_CODE
from xlnet_jax.finetune.forward import apply_segments
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.model.heads import SequenceHead

WORDS = "river mountain forest lake engine wheel motor gear the a is here and".split()
VOCAB = 40  # what SentencePiece can build from WORDS
TINY = dict(d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64)
FLAGS = [
    "--config=configs/finetune/cpu.py",
    "--config.seq_len=16",
    "--config.batch_size=8",
    "--config.num_train_steps=4",
    "--config.warmup_steps=1",
    "--config.checkpoint_every=2",
    "--config.keep_checkpoints=3",
    "--config.log_every=2",
    "--config.learning_rate=1e-3",
]


def _sentences(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(3, 9))) for _ in range(count)]


@pytest.fixture(scope="module", autouse=True)
def compilation_cache():
    """The test run's compilation cache (a resume's compile then comes from it)."""
    with finetune_source.run_compilation_cache():
        yield


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """An HF directory of a random 2 x 32 XLNet with a 40-piece tokenizer of its own."""
    texts = _sentences(np.random.default_rng(0), 2000)
    root = tmp_path_factory.mktemp("source")
    return finetune_source.write_source(root, texts, VOCAB, TINY, scale=0.05)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A generic classification task: is the first word a landscape's or a machine's?"""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(2)
    for split, count in (("train", 64), ("dev", 12)):
        lines = []
        for text in _sentences(rng, count):
            first = rng.choice(WORDS[:8])
            lines.append(f"{'land' if WORDS.index(first) < 4 else 'machine'}\t{first} {text}")
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    (root / "test.tsv").write_text("river a is\ngear the\n")
    return root


def finetune(workdir, source, data, *extra) -> int:
    args = ["--task_name=classification", f"--data_dir={data}", f"--init_from={source}"]
    argv = ["finetune", *args, f"--workdir={workdir}", *FLAGS, *extra]
    with mock.patch.object(sys, "argv", ["xlnet-jax", *argv]):  # config_flags reads sys.argv
        return cli.main(argv)


@pytest.fixture(scope="module")
def straight(tmp_path_factory, source, data):
    """An uninterrupted 4-step run, checkpoints at steps 2 and 4."""
    workdir = tmp_path_factory.mktemp("straight")
    assert finetune(workdir, source, data) == 0
    return workdir


def test_a_run_leaves_results_predictions_and_metrics(straight, data):
    results = json.loads((straight / "eval_results.json").read_text())
    assert results["step"] == 4 and set(results["dev"]) == {"accuracy", "f1", "loss"}
    dev = [json.loads(line) for line in (straight / "predictions" / "dev.jsonl").open()]
    assert [p["index"] for p in dev] == [str(i) for i in range(12)]
    assert all(p["prediction"] in ("land", "machine") and len(p["logits"]) == 2 for p in dev)
    gold = [line.split("\t")[0] for line in (data / "dev.tsv").read_text().splitlines()]
    accuracy = np.mean([p["prediction"] == g for p, g in zip(dev, gold, strict=True)])
    assert results["dev"]["accuracy"] == pytest.approx(accuracy)
    assert len((straight / "predictions" / "test.jsonl").read_text().splitlines()) == 2
    steps = [json.loads(line)["step"] for line in (straight / "metrics.jsonl").open()]
    assert [s for s in steps if s] == [1, 2, 3, 4, 4]  # train steps, then the final eval
    assert any((straight / "tensorboard").rglob("events.out.tfevents.*"))
    info = json.loads((straight / "finetune.json").read_text())
    assert info["labels"] == ["land", "machine"] and (straight / "spiece.model").is_file()


REPO = pathlib.Path(__file__).resolve().parents[1]


def start(workdir, source, data, step_delay: float, *extra: str) -> subprocess.Popen:
    """`xlnet-jax finetune` as a real process, each step's batch `step_delay` s late
    (scripts/slow_steps.py), its output in WORKDIR.log; the 8 devices, matmul precision
    and compilation cache of this module's runs, so it computes (and compiles) what they do."""
    args = ["--task_name=classification", f"--data_dir={data}", f"--init_from={source}"]
    command = [sys.executable, str(REPO / "scripts" / "slow_steps.py"), str(step_delay)]
    command += ["finetune", *args, f"--workdir={workdir}", *FLAGS, *extra]
    precision = jax.config.jax_default_matmul_precision  # conftest's, for the cache's key
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_DEFAULT_MATMUL_PRECISION": precision}
    with open(f"{workdir}.log", "ab") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def log_tail(workdir) -> str:
    return "\n".join(pathlib.Path(f"{workdir}.log").read_text().splitlines()[-30:])


def wait_for(condition, process: subprocess.Popen, workdir, timeout: float = 900) -> None:
    """Waits for `condition`; the bound is for a hung run, far past a loaded machine's pace."""
    deadline = time.time() + timeout
    while not condition():
        assert process.poll() is None, "the run ended early:\n" + log_tail(workdir)
        assert time.time() < deadline, "timed out:\n" + log_tail(workdir)
        time.sleep(0.005)


def checkpoint_done(workdir, step: int) -> bool:
    """Whether step's checkpoint is finalised (orbax renames its temporary dir when done)."""
    return (workdir / "checkpoints" / str(step) / "_CHECKPOINT_METADATA").exists()


def logged(workdir, step: int) -> bool:
    metrics = workdir / "metrics.jsonl"
    return metrics.exists() and f'"step": {step},' in metrics.read_text()


def assert_same_run(ours, reference) -> None:
    """Step 4's checkpoint (params, optimizer state, step) bit for bit, the same eval
    results and predictions byte for byte, and each step logged once."""
    mine, theirs = read_checkpoint(str(ours), 4), read_checkpoint(str(reference), 4)
    for a, b in zip(jax.tree.leaves(mine["state"]), jax.tree.leaves(theirs["state"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for name in ("eval_results.json", "predictions/dev.jsonl", "predictions/test.jsonl"):
        assert (ours / name).read_bytes() == (reference / name).read_bytes(), name
    steps = [json.loads(line)["step"] for line in (ours / "metrics.jsonl").open()]
    assert [s for s in steps if s] == [1, 2, 3, 4, 4]


def test_sigkill_then_rerun_is_bit_exact(straight, source, data, tmp_path):
    """SIGKILL once step 2's checkpoint is on disk, before step 4's: rerunning the same
    command resumes at step 2 and ends as the uninterrupted run did."""
    workdir = tmp_path / "killed"
    process = start(workdir, source, data, step_delay=2.0)  # 4 s between saves 2 and 4
    wait_for(lambda: checkpoint_done(workdir, 2), process, workdir)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    assert not checkpoint_done(workdir, 4) and not (workdir / "eval_results.json").exists()
    assert start(workdir, source, data, step_delay=0).wait(timeout=300) == 0, log_tail(workdir)
    assert "Resumed from step 2" in log_tail(workdir)
    assert_same_run(workdir, straight)


def test_sigterm_saves_stops_with_exit_6_and_the_rerun_is_bit_exact(
    straight, source, data, tmp_path
):
    """SIGTERM after step 2 is logged: the run saves step 3, exits 6 (stopped short, never
    taken for finished) without evaluating; the rerun resumes at step 3."""
    workdir = tmp_path / "stopped"
    process = start(workdir, source, data, step_delay=2.0)  # the signal lands in step 3
    wait_for(lambda: logged(workdir, 2), process, workdir)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == STOPPED_EXIT_CODE, log_tail(workdir)
    assert "SIGTERM: saved step 3 and stopped; rerun the same command" in log_tail(workdir)
    assert checkpoint_done(workdir, 3) and not (workdir / "eval_results.json").exists()
    assert start(workdir, source, data, step_delay=0).wait(timeout=300) == 0, log_tail(workdir)
    assert "Resumed from step 3" in log_tail(workdir)
    assert_same_run(workdir, straight)


def test_export_hf_gives_the_hf_class_the_same_logits(straight, data, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    assert cli.main(["export-hf", str(straight), f"--out={tmp_path / 'hf'}"]) == 0
    model = transformers.XLNetForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert model.config.id2label == {0: "land", 1: "machine"}
    task = get_task("classification")
    examples = task.read(str(data), "dev")
    config = json.loads((straight / "config.json").read_text())
    encoder = TextEncoder(str(tmp_path / "hf" / "spiece.model"))  # the exported tokenizer

    class Layout:
        seq_len, num_segments = config["seq_len"], 1

    arrays = task.featurize(examples, encoder, Layout, ["land", "machine"]).arrays
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(arrays["input_ids"][:, 0]),
            token_type_ids=torch.tensor(arrays["seg_ids"][:, 0]),
            attention_mask=torch.tensor(1 - arrays["input_mask"][:, 0].astype(np.int64)),
        ).logits.numpy()
    dev = [json.loads(line)["logits"] for line in (straight / "predictions" / "dev.jsonl").open()]
    assert np.abs(logits - np.array(dev)).max() <= 1e-5


def test_a_tokenizer_of_another_vocabulary_is_one_line(source, data, tmp_path, capsys, monkeypatch):
    other = tmp_path / "other"
    shutil.copytree(source, other)
    train_tokenizer(_sentences(np.random.default_rng(3), 2000), str(other / "spiece.model"), 30)
    with pytest.raises(SystemExit) as exited:
        finetune(tmp_path / "run", other, data)
    assert exited.value.code == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"has 30 pieces, its model a vocab_size of {VOCAB}" in error
    assert not (tmp_path / "run").exists()  # nothing written


def test_segments_carry_the_first_words_to_the_head_only_through_the_memory():
    """A text of 3 segments: with memory the last segment's logits change with the first
    segment's tokens; without (one segment of the same last tokens) they cannot; a short
    text gives the same logits read as 3 segments or as 1."""
    config = ModelConfig(
        vocab_size=VOCAB, **{**TINY, "n_layer": 1}, mem_len=16, dropout=0.0, dropatt=0.0
    )
    module = SequenceHead(config, 2)
    rng = np.random.default_rng(4)
    ids = rng.integers(9, VOCAB, (2, 3, 8)).astype(np.int32)
    inputs = {"input_ids": ids, "seg_ids": np.zeros_like(ids), "input_mask": ids < 0}
    empty = jnp.zeros((1, 2, 0, 32)), jnp.zeros((2, 0), bool)
    init = jax.jit(lambda *args: module.init(jax.random.key(0), *args, deterministic=True))
    params = init(ids[:, 0], ids[:, 0], ids[:, 0] < 0, *empty)["params"]
    run = jax.jit(lambda x: apply_segments(module, params, x, deterministic=True))
    changed = {**inputs, "input_ids": ids.copy()}
    changed["input_ids"][:, 0] = rng.integers(9, VOCAB, (2, 8))
    # the logits move by far more than float32 rounding (~1e-9 at their 0.03 scale)
    assert np.abs(run(changed) - run(inputs)).max() > 1e-6
    last = {k: v[:, -1:] for k, v in inputs.items()}
    last_changed = {k: v[:, -1:] for k, v in changed.items()}
    np.testing.assert_array_equal(run(last), run(last_changed))
    padded = {k: v.copy() for k, v in inputs.items()}
    padded["input_mask"][:, :2] = True
    padded["input_mask"][:, 2, :3] = True
    short = {k: v[:, 2:] for k, v in padded.items()}
    np.testing.assert_allclose(run(padded), run(short), atol=1e-5)


def test_seeds_run_one_after_another_and_report_the_median(source, data, tmp_path):
    """Two seeds from the same source params (the first run's donated buffers must not be
    the source's): each its own workdir and results; seeds.json holds the median."""
    assert finetune(tmp_path, source, data, "--seeds=2", "--config.checkpoint_every=4") == 0
    record = json.loads((tmp_path / "seeds.json").read_text())
    accuracies = [record["seeds"][seed]["dev"]["accuracy"] for seed in ("0", "1")]
    assert record["median"]["dev"]["accuracy"] == pytest.approx(np.median(accuracies))
    for seed in (0, 1):
        results = json.loads((tmp_path / f"seed_{seed}" / "eval_results.json").read_text())
        assert results["dev"]["accuracy"] == accuracies[seed]


def test_seeds_side_by_side_stop_together_and_end_as_each_seed_run_alone(source, data, tmp_path):
    """--seeds 2 --devices_per_seed 4: seed 0 on devices 0-3 and seed 1 on devices 4-7, at
    once (a thread each). SIGTERM once both logged step 2: each saves and stops, exit 6; the
    same command resumes both. Each seed's checkpoint, results and predictions are then
    those of the seed run by itself (--config.seed K) on a host of just its 4 devices, bit
    for bit (the same program), and seeds.json's medians are theirs."""
    side, flags = tmp_path / "side", ("--seeds=2", "--devices_per_seed=4")
    process = start(side, source, data, 1.0, *flags)
    wait_for(lambda: all(logged(side / f"seed_{s}", 2) for s in (0, 1)), process, side)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == STOPPED_EXIT_CODE, log_tail(side)
    said = pathlib.Path(f"{side}.log").read_text()
    assert "seed 0: SIGTERM" in said and "seed 1: SIGTERM" in said, said
    assert not (side / "seeds.json").exists()
    assert finetune(side, source, data, *flags) == 0
    record = json.loads((side / "seeds.json").read_text())
    devices = jax.devices()
    alone = {}
    for seed, group in ((0, devices[:4]), (1, devices[4:])):
        with mock.patch.object(jax, "devices", lambda group=group: group):
            workdir = tmp_path / f"alone_{seed}"
            assert finetune(workdir, source, data, f"--config.seed={seed}") == 0
        assert_same_run(side / f"seed_{seed}", workdir)
        alone[seed] = json.loads((workdir / "eval_results.json").read_text())
        assert record["seeds"][str(seed)] == {k: v for k, v in alone[seed].items() if k != "step"}
    accuracies = [alone[s]["dev"]["accuracy"] for s in (0, 1)]
    assert record["median"]["dev"]["accuracy"] == np.median(accuracies)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--seeds=2", "--devices_per_seed=3"], "must divide this host's 8 devices; use one of"),
        (["--devices_per_seed=2"], "--devices_per_seed 2: it sets how many devices each of"),
        (["--seeds=2", "--devices_per_seed=8", "--config.batch_size=4"], "batch_size"),
    ],
)
def test_seeds_that_cannot_run_side_by_side_are_one_line(
    flags, said, source, data, tmp_path, capsys, monkeypatch
):
    try:
        code = finetune(tmp_path / "run", source, data, *flags)
    except SystemExit as exited:  # a config error exits; a usage error is returned
        code = exited.code
    assert code in (1, 2)
    lines = capsys.readouterr().err.strip().splitlines()
    assert said in lines[-1], lines
    assert not (tmp_path / "run" / "seed_0").exists()  # nothing started


@pytest.mark.parametrize(
    "policy, steps, expected",
    [
        ("halt", 4, r"Non-finite \w+ at step (\d+) \(nonfinite_policy=halt\)"),
        ("skip", 40, r"The last \d+ steps of the run, up to step (\d+), were skipped"),
    ],
)
def test_a_diverged_run_stops_in_one_line_and_writes_no_result(
    policy, steps, expected, source, data, tmp_path, capsys, monkeypatch
):
    """A learning rate far too large: under `halt` the first non-finite step stops the run;
    under the default `skip` the streak of skipped steps up to the end stops it. Either
    way the command fails with the loop's one line (pretraining's), and no
    eval_results.json or final checkpoint looks like a result."""
    workdir = tmp_path / policy
    with pytest.raises(SystemExit) as exited:
        finetune(
            workdir, source, data, "--config.learning_rate=1e30",
            f"--config.nonfinite_policy={policy}", f"--config.num_train_steps={steps}",
            "--config.checkpoint_every=1000",
        )  # fmt: skip
    assert exited.value.code != 0
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("xlnet-jax finetune: error: "), error
    found = re.search(expected, error)
    assert found, error
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").open()]
    named = int(found.group(1))
    assert [r for r in records if r.get("step") == named][0]["nonfinite"] != 0
    assert not (workdir / "eval_results.json").exists()
    assert not checkpoint_done(workdir, steps)
