"""Fine-tuning as a pod runs it (docs/tpu-pods.md): `launch run finetune --backend local`
with a gs:// workdir and a gs:// --init_from, against the GCS emulator, from a pretraining
run in the bucket and from an HF export in the bucket. SentencePiece and transformers read
only local files: the tokenizer comes through the path layer (issue 61: the launched
fine-tuning failed with `gs://.../corpus/spm.model is not a readable SentencePiece model`).

One emulator and one tiny pretraining run (2 x 32 XLNet, 2 steps) for the module; each
fine-tuning runs 2 steps on 16-token rows.
"""

import json
import os
import pathlib
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest

from tests import finetune_source, gcs_emulator
from tests import train_harness as harness
from tests.test_data_common import write_documents
from tests.xla_flags import FAST_COMPILE
from xlnet_jax import cli
from xlnet_jax.launch import pod

pytestmark = pytest.mark.usefixtures("committed_tree")
REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "finetune" / "cpu.py")
BUCKET = "xlnet-finetune"
ROOT = f"gs://{BUCKET}"
WORDS = "river mountain forest lake engine wheel motor gear the a is here and".split()
OVERRIDES = [
    "--config.seq_len=16",
    "--config.batch_size=8",
    "--config.num_train_steps=2",
    "--config.warmup_steps=1",
    "--config.checkpoint_every=2",
    "--config.log_every=1",
]


def _sentences(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(3, 9))) for _ in range(count)]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """The emulator's URL, this process pointed at it (the launched processes inherit it),
    with the cache of staged files in the test's folder."""
    cache = tmp_path_factory.mktemp("cache")
    env = {"XLA_FLAGS": FAST_COMPILE, "PYTHONPATH": str(REPO), "XLNET_JAX_CACHE_DIR": str(cache)}
    with finetune_source.run_compilation_cache(), mock.patch.dict(os.environ, env):
        with gcs_emulator.running(BUCKET) as url, gcs_emulator.pointed_at(url):
            yield url


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> pathlib.Path:
    """A two-label task: is the first word a landscape's or a machine's?"""
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("data")
    for split, count in (("train", 32), ("dev", 8)):
        lines = []
        for text in _sentences(rng, count):
            first = rng.choice(WORDS[:8])
            lines.append(f"{'land' if WORDS.index(first) < 4 else 'machine'}\t{first} {text}")
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def pretrained(bucket, tmp_path_factory) -> str:
    """A 2-step pretraining run in the bucket, on a corpus prepared into the bucket."""
    text = str(tmp_path_factory.mktemp("text") / "text.txt")
    rng = np.random.default_rng(1)
    write_documents(text, [[s.capitalize() + "." for s in _sentences(rng, 6)] for _ in range(40)])
    corpus = f"{ROOT}/corpus"
    assert cli.main(["prepare", "--out", corpus, text, "--vocab_size", "60"]) == 0
    workdir = f"{ROOT}/pretrained"
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "train", "--config", harness.CONFIG,
         "--workdir", workdir, "--num_cpu_devices=1", f"--config.corpus_dir={corpus}",
         "--config.vocab_size=60", "--config.num_train_steps=2", "--config.warmup_steps=1",
         "--config.checkpoint_every=2"],
        env=harness.environment(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def launch(workdir: str, init_from: str, data: pathlib.Path, logs: pathlib.Path) -> int:
    argv = ["run", "finetune", "--backend", "local", "--config", CONFIG, "--workdir", workdir,
            "--log-dir", str(logs), "--timeout", "900", "--max-restarts", "0",
            "--task-name=classification", f"--data-dir={data}", f"--init-from={init_from}",
            *OVERRIDES]  # fmt: skip
    return pod.main(argv)


def finished(url: str, name: str) -> dict:
    """The fine-tuning's eval_results.json, read from the emulator over its API."""
    return json.loads(gcs_emulator.read_object(url, BUCKET, f"{name}/eval_results.json"))


def test_from_a_pretraining_run_in_the_bucket(bucket, pretrained, data, tmp_path, capsys):
    code = launch(f"{ROOT}/ft-run", pretrained, data, tmp_path / "logs")
    log = (tmp_path / "logs" / "process_0.log").read_text()
    assert code == 0, capsys.readouterr().err + log[-3000:]
    assert finished(bucket, "ft-run")["step"] == 2
    # one line per checkpoint saved, once complete (checkpoint_every 2: step 2 only)
    assert log.count("Checkpoint of step ") == 1, log
    assert f"Checkpoint of step 2 saved in {ROOT}/ft-run/checkpoints/2" in log, log
    names = gcs_emulator.list_objects(bucket, BUCKET, "ft-run/")
    assert "ft-run/spiece.model" in names  # the corpus's tokenizer, copied from the bucket
    assert not list(tmp_path.rglob("gs:*")), "a gs:// path became a local directory"


def test_from_an_hf_export_in_the_bucket(bucket, data, tmp_path, capsys):
    local = tmp_path / "hf"
    local.mkdir()
    shape = dict(d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64)
    rng = np.random.default_rng(2)
    finetune_source.write_source(local, _sentences(rng, 500), 40, shape, scale=0.05)
    for path in local.iterdir():
        gcs_emulator.write_object(bucket, BUCKET, f"hf/{path.name}", path.read_bytes())
    code = launch(f"{ROOT}/ft-hf", f"{ROOT}/hf", data, tmp_path / "logs")
    log = (tmp_path / "logs" / "process_0.log").read_text()
    assert code == 0, capsys.readouterr().err + log[-3000:]
    assert finished(bucket, "ft-hf")["step"] == 2
    copied = gcs_emulator.read_object(bucket, BUCKET, "ft-hf/spiece.model")
    assert copied == (local / "spiece.model").read_bytes()
    # import-hf from the bucket into the bucket; export-hf of the fine-tuning into the bucket,
    # its AutoTokenizer (transformers reads local files: a staged copy) checked on the task.
    assert cli.main(["import-hf", f"{ROOT}/hf", "--out", f"{ROOT}/imported"]) == 0
    assert "imported/params.safetensors" in gcs_emulator.list_objects(bucket, BUCKET, "imported/")
    argv = ["export-hf", f"{ROOT}/ft-hf", "--out", f"{ROOT}/ft-hf-export", f"--data_dir={data}"]
    assert cli.main(argv) == 0
    said = capsys.readouterr().out
    assert "AutoTokenizer's ids equal the run's on 40/40 rows" in said, said
