"""Files from elsewhere are read as data, never run: pickles are refused, metadata is JSON.

Each malicious file carries a payload that would create a marker file if it were ever
unpickled or evaluated; each test first shows the payload is live, then that our readers
refuse it and the marker never appears. Launcher commands are shell-quoted: see
tests/test_launch.py::test_hostile_values_survive_two_real_shells.
"""

import ast
import json
import logging
import pathlib
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests import train_harness as harness
from xlnet_jax.checkpoint import hf
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.corpus import load_split
from xlnet_jax.data.manifest import manifest_fingerprint
from xlnet_jax.data.prepare import load_manifest
from xlnet_jax.errors import CheckpointError

SOURCES = [harness.REPO / "xlnet_jax"]


class Payload:
    """Unpickling this calls open(marker, "w"): it creates the marker file."""

    def __init__(self, marker: pathlib.Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_payload_is_live(tmp_path):
    """The payload really runs when unpickled, so its absence below means something."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(Payload(marker))).close()
    assert marker.exists()


def test_hf_import_refuses_a_pickle_in_pytorch_model_bin(tmp_path):
    marker = tmp_path / "marker"
    src = tmp_path / "hf"
    src.mkdir()
    config = ModelConfig(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=64)
    (src / "config.json").write_text(json.dumps(hf.config_to_hf(config)))
    torch.save({"transformer.mask_emb": Payload(marker)}, src / "pytorch_model.bin")
    with pytest.raises(ValueError, match="refused, it holds objects other than tensors"):
        hf.load_hf(src)
    assert not marker.exists()
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "import-hf", str(src),
         "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "refused" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not marker.exists()


def test_corpus_cache_refuses_a_pickled_array(tmp_path):
    """The token cache is read with np.load(mmap_mode="r"): an object array is refused
    (numpy cannot memory-map one, and allow_pickle stays False)."""
    marker = tmp_path / "marker"
    corpus = tmp_path / "corpus"
    shutil.copytree(harness.corpus_dir(), corpus)
    manifest = load_manifest(str(corpus))
    load_split(manifest, "train")  # builds the cache files
    cached = corpus / "cache" / f"{manifest_fingerprint(manifest)[:16]}-train-tokens.npy"
    assert cached.exists()
    np.save(cached, np.array([Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="memory-mapped: Python objects|allow_pickle=False"):
        load_split(manifest, "train")
    assert not marker.exists()


PYTHON_META = "__import__('pathlib').Path({marker!r}).touch() or {{}}"


@pytest.mark.parametrize("kind", ["python", "pickle"])
def test_checkpoint_meta_is_parsed_as_json_never_run(kind, tmp_path, caplog):
    marker = tmp_path / "marker"
    workdir = harness.copy_run(harness.reference_run(), tmp_path / "run")
    meta = workdir / "checkpoints" / "12" / "meta" / "metadata"
    if kind == "python":
        meta.write_text(PYTHON_META.format(marker=str(marker)))
    else:
        meta.write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(CheckpointError):
        read_checkpoint(str(workdir), 12)
    config, fingerprint, abstract = harness.restore_setup()
    checkpointer = Checkpointer(str(workdir), config)
    with caplog.at_level(logging.WARNING, logger="xlnet_jax.checkpoint.checkpointer"):
        state = checkpointer.restore(abstract, config, fingerprint)
    checkpointer.close()
    assert int(state.step) == 10 and "step 12 (meta unreadable" in caplog.text
    assert not marker.exists()


def calls(tree: ast.AST):
    """(dotted name, call node) of every call in a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield ast.unparse(node.func), node


def keyword(node: ast.Call, name: str):
    return next((ast.unparse(k.value) for k in node.keywords if k.arg == name), None)


def test_no_unsafe_deserialisation_in_the_sources():
    """No eval/exec/pickle/marshal/yaml.load; torch.load only with weights_only=True;
    np.load never with allow_pickle=True; subprocess never through a shell."""
    unsafe = {"eval", "exec", "pickle.load", "pickle.loads", "marshal.loads", "yaml.load"}
    found = []
    for path in sorted(p for root in SOURCES for p in root.rglob("*.py")):
        for name, node in calls(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(harness.REPO)}:{node.lineno} {name}"
            if name in unsafe or name.endswith(("os.system", "os.popen")):
                found.append(where)
            if name == "torch.load" and keyword(node, "weights_only") != "True":
                found.append(where + " without weights_only=True")
            if name.endswith("np.load") and keyword(node, "allow_pickle") not in (None, "False"):
                found.append(where + " with allow_pickle")
            if keyword(node, "shell") not in (None, "False"):
                found.append(where + " with shell=")
    assert not found, found
