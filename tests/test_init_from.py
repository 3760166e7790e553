"""Continued pretraining: `train --init_from` an export of a trained run starts from its params.

One export of the session's reference run (tests/train_harness.py) serves every test: the
first step of a run started from it must score exactly what the source scores on that batch.
The same export fine-tunes as a transformers classifier (docs/fine-tuning.md).
"""

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from tests import train_harness as harness
from tests.helpers import assert_f32_close
from tests.train_config import get_config
from xlnet_jax.checkpoint import hf
from xlnet_jax.checkpoint.meta import ARCHITECTURE_FIELDS, check_compatible, make_meta
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.errors import CheckpointError, ConfigError, DataError
from xlnet_jax.run.init_from import check_source, load_source, place_params
from xlnet_jax.run.preflight import check_run_from
from xlnet_jax.training import sharding, steps
from xlnet_jax.training.program import build_program

# A dropout-free run: its first training loss is a deterministic forward, as eval's is.
NO_DROPOUT = ("--config.dropout=0", "--config.dropatt=0")
STEPS = 12  # fine-tuning steps on the export


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(source workdir, its `xlnet-jax export-hf` directory, with fine-tuning dropout 0.2)."""
    source = harness.reference_run()
    out = tmp_path_factory.mktemp("export") / "hf"
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "export-hf", str(source), "--out", str(out),
         "--dropout", "0.2"],
        env=harness.environment(), capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # One line naming the step, none of orbax's read-only warnings.
    assert done.stdout.startswith(f"exported step 12 of {source} (its newest checkpoint)")
    assert done.stdout.endswith(
        "dropout 0.2 for fine-tuning (pretrained with dropout 0.1, dropatt 0.1; --dropout "
        "sets it)\n"
    )
    assert done.stderr == "", done.stderr
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o644
    return source, out


def source_loss_on_first_batch(source, config) -> float:
    """The source's deterministic PLM loss on a new run's step-0 batch and PLM sample."""
    params = harness.final_params(source)
    program = build_program(config, sharding.make_mesh(config))
    with program.activate():
        state = program.init_state()
        plm_key, _ = steps.step_keys(state.rng, 0)
        batch = program.put_batch(program.batcher(config.corpus_dir, "train").batch(0))
        params = place_params(params, program.state_shardings.params)
        _, (nll, count, _) = program.eval_step(params, program.zero_mems(), batch, plm_key)
    return float(nll / count)


def test_first_step_from_an_hf_export_scores_as_the_source(exported, tmp_path):
    source, out = exported
    workdir = tmp_path / "continued"
    steps_ = ("--config.num_train_steps=1", "--config.warmup_steps=0")
    harness.run(workdir, "--init_from", str(out), *NO_DROPOUT, *steps_)
    assert f"Starting from the params of the HF directory {out}" in harness.log_tail(workdir)
    config = get_config()
    config.update(corpus_dir=harness.corpus_dir(), dropout=0.0, dropatt=0.0)
    # The same forward compiled twice (inside the train step's grad, and alone): fusion may
    # reorder its sums, ~sqrt(64) roundings for each of the ~20 contractions of 2 layers,
    # passed on through the log-softmax's normalisation into the mean loss: 160 roundings.
    assert_f32_close(
        harness.losses(workdir)[1], source_loss_on_first_batch(source, config), roundings=160
    )


def test_every_source_kind_gives_the_same_params(exported, tmp_path):
    source, out = exported
    hf.import_hf(out, tmp_path / "params")
    want = load_source(str(source))
    for path, kind in ((out, "HF directory"), (tmp_path / "params", "params directory")):
        got = load_source(str(path))
        assert got.kind == kind
        for name in ARCHITECTURE_FIELDS:
            assert getattr(got.model, name) == getattr(want.model, name), name
        harness.assert_trees_equal(got.params, want.params)
        assert got.tokenizer is not None  # carried along by export-hf and import-hf


def test_another_architecture_or_tokenizer_is_refused_in_one_line(exported, tmp_path):
    _, out = exported
    config = get_config()
    config.update(corpus_dir=harness.corpus_dir(), d_inner=128, n_layer=3)
    manifest = load_manifest(config.corpus_dir)
    with pytest.raises(ConfigError) as info:
        check_source(load_source(str(out)), config, manifest)
    assert str(info.value) == (
        f"--init_from {out}: its architecture differs in n_layer, d_inner (the config has "
        "n_layer=3, d_inner=128); pass --config.n_layer=2 --config.d_inner=64."
    )
    other = shutil.copytree(out, tmp_path / "other-tokenizer")
    (other / "spiece.model").write_bytes(b"another tokenizer")
    config.update(d_inner=64, n_layer=2)
    with pytest.raises(DataError, match=r"is not the one .* prepared with; prepare the corpus"):
        check_source(load_source(str(other)), config, manifest)


def test_init_from_problems_come_in_the_first_round_with_the_others(exported):
    """The source's architecture is reported beside the config's own problems, not after
    they are fixed (issue 32, friction 4)."""
    _, out = exported
    config = get_config()
    config.update(corpus_dir=harness.corpus_dir(), n_layer=3, warmup_steps=10**6)
    with pytest.raises(ConfigError) as info:
        check_run_from(config, 1, evaluates=False, init_from=str(out))
    lines = str(info.value).splitlines()
    assert lines[0] == "2 problems with the config and corpus:"
    assert lines[1].startswith("  config.warmup_steps: must not exceed num_train_steps")
    assert lines[2].startswith(f"  --init_from {out}: its architecture differs in n_layer")
    config.update(n_layer=2, warmup_steps=0)
    _, _, source = check_run_from(config, 1, evaluates=False, init_from=str(out))
    assert source.kind == "HF directory"


def test_a_missing_init_from_is_one_problem_among_the_others(tmp_path):
    config = get_config()
    config.update(corpus_dir=str(tmp_path / "no-corpus"))
    with pytest.raises(ConfigError) as info:
        check_run_from(config, 1, evaluates=False, init_from=str(tmp_path / "no-run"))
    lines = str(info.value).splitlines()
    assert lines[0] == "2 problems with the config and corpus:"
    assert f"--init_from {tmp_path / 'no-run'}: no such directory." in lines[1]
    assert lines[2].startswith("  config.corpus_dir: ")


def test_a_new_corpus_in_an_old_workdir_names_init_from_into_a_new_one(tmp_path):
    """The refusal says how to continue on the new corpus (issue 32, friction 10)."""
    config = get_config()
    step = tmp_path / "runs" / "old" / "checkpoints" / "12"
    meta = make_meta(config, "a" * 64, 12)
    with pytest.raises(CheckpointError) as info:
        check_compatible(meta, config, "b" * 64, step)
    assert str(info.value).endswith(
        f"--workdir NEW_WORKDIR --init_from {tmp_path / 'runs' / 'old'}."
    )


def test_an_hf_directory_with_only_tokenizer_json_is_checked_as_with_spiece(exported, tmp_path):
    """transformers 5.x's save_pretrained writes no spiece.model: the tokenizer.json's
    Unigram model stands in for it (issue 32, friction 8)."""
    _, out = exported
    saved = shutil.copytree(out, tmp_path / "saved")
    (saved / "spiece.model").unlink()
    source = load_source(str(saved))
    assert source.tokenizer is not None and source.tokenizer.endswith(".model")
    config = get_config()
    config.update(corpus_dir=harness.corpus_dir())
    check_source(source, config, load_manifest(config.corpus_dir))  # accepted


def _fine_tune_script():
    """scripts/fine_tune_hf.py, the script docs/fine-tuning.md shows, as a module."""
    path = harness.REPO / "scripts" / "fine_tune_hf.py"
    spec = importlib.util.spec_from_file_location("fine_tune_hf", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_export_fine_tunes_as_a_sequence_classifier(exported):
    """Issue 38, item 7: the export loads into XLNetForSequenceClassification with its own
    tokenizer and the export's dropout, and a few steps on a two-class task lower the loss."""
    _, out = exported
    fields = json.loads((out / "config.json").read_text())
    assert (fields["dropout"], fields["dropatt"]) == (0.2, 0.2)  # the run trained with 0.1
    script = _fine_tune_script()
    # Which of two small vocabularies a text is drawn from; 8 texts of each.
    words = (["river", "stone", "water", "green"], ["number", "value", "return", "function"])
    texts = [" ".join(words[i % 2][(i + k) % 4] for k in range(6)) for i in range(16)]
    labels = [i % 2 for i in range(16)]
    model, losses = script.fine_tune(
        str(out), texts, labels, steps=STEPS, batch_size=8, learning_rate=1e-2, log=print
    )
    assert model.config.dropout == 0.2
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.5 * first, losses
    assert script.accuracy(str(out), model, texts, labels) == 1.0
