"""HF import/export round trips (checked with the real transformers class) and their errors."""

import copy
import dataclasses
import json
import shutil
import sys

import flax
import numpy as np
import pytest
import torch
import transformers

from tests.helpers import HF_PARITY_ROUNDINGS, assert_f32_close
from tests.hf_reference import hf_forward
from xlnet_jax import cli
from xlnet_jax.checkpoint import hf
from xlnet_jax.config import ModelConfig

HF_SMALL = dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_inner=64, mem_len=8, reuse_len=4)


def _hf_inputs(seed: int = 0) -> dict:
    """A small HF-convention batch: 2 rows of 8 tokens, predicting the last 2 with no peeking."""
    rng = np.random.default_rng(seed)
    perm_mask = np.zeros((2, 8, 8), np.float32)
    perm_mask[:, :, 6:] = 1.0
    target_mapping = np.zeros((2, 2, 8), np.float32)
    target_mapping[:, [0, 1], [6, 7]] = 1.0
    return dict(
        input_ids=rng.integers(0, 64, (2, 8)),
        token_type_ids=np.repeat([[0, 0, 0, 1, 1, 1, 1, 2]], 2, axis=0),
        perm_mask=perm_mask,
        target_mapping=target_mapping,
    )


def _hf_logits(model: transformers.XLNetLMHeadModel, inputs: dict) -> np.ndarray:
    with torch.no_grad():
        return model(**{k: torch.tensor(v) for k, v in inputs.items()}).logits.numpy()


def _assert_same_tree(a: dict, b: dict) -> None:
    flat_a, flat_b = (flax.traverse_util.flatten_dict(t, sep="/") for t in (a, b))
    assert flat_a.keys() == flat_b.keys()
    for key in flat_a:
        np.testing.assert_array_equal(flat_a[key], flat_b[key], err_msg=key)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """An HF XLNetLMHeadModel directory (random weights) and the model itself."""
    torch.manual_seed(0)
    model = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**HF_SMALL, dropatt=0.05)).eval()
    path = tmp_path_factory.mktemp("hf")
    model.save_pretrained(path)
    return path, model


def test_import_export_import_is_identical_and_hf_reloads_it(hf_dir, tmp_path):
    src, model = hf_dir
    config, params = hf.load_hf(src)
    assert config == ModelConfig(**{**HF_SMALL, "d_head": 8}, dropatt=0.05)
    hf.save_hf(tmp_path, config, params)
    config2, params2 = hf.load_hf(tmp_path)
    assert config2 == config
    _assert_same_tree(params, params2)

    reloaded = transformers.XLNetLMHeadModel.from_pretrained(tmp_path).eval()
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(
            reloaded.state_dict()[name].numpy(), tensor.numpy(), err_msg=name
        )
    inputs = _hf_inputs()
    np.testing.assert_array_equal(_hf_logits(reloaded, inputs), _hf_logits(model, inputs))
    ours, _ = hf_forward(config, params, **inputs)
    assert_f32_close(ours, _hf_logits(model, inputs), roundings=HF_PARITY_ROUNDINGS)


def test_pytorch_bin_import_matches_safetensors(hf_dir, tmp_path):
    src, model = hf_dir
    shutil.copy(src / "config.json", tmp_path / "config.json")
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    _assert_same_tree(hf.load_hf(tmp_path)[1], hf.load_hf(src)[1])


def test_bfloat16_checkpoint_imports_as_float32(hf_dir, tmp_path):
    src, model = hf_dir
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(tmp_path)
    _, params = hf.load_hf(tmp_path)
    q = params["layers"]["attention"]["q"]
    assert q.dtype == np.float32
    expected = model.transformer.layer[1].rel_attn.q.detach().to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(q[1], expected)


def test_params_dir_and_cli_functions_round_trip(hf_dir, tmp_path):
    src, model = hf_dir
    config = hf.import_hf(src, tmp_path / "ours")
    loaded_config, params = hf.load_params_dir(tmp_path / "ours")
    assert loaded_config == config
    _assert_same_tree(params, hf.load_hf(src)[1])
    assert hf.export_hf(tmp_path / "ours", tmp_path / "back") == config
    reloaded = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "back").eval()
    np.testing.assert_array_equal(
        _hf_logits(reloaded, _hf_inputs()), _hf_logits(model, _hf_inputs())
    )


def test_export_writes_fine_tuning_dropout_unless_told_otherwise(hf_dir, tmp_path, capsys):
    """A run pretrained without dropout exports with 0.1 (issue 38, item 7), or --dropout's."""
    config, params = hf.load_hf(hf_dir[0])
    hf.save_params_dir(
        tmp_path / "ours", dataclasses.replace(config, dropout=0.0, dropatt=0.0), params
    )
    for extra, want in (([], 0.1), (["--dropout", "0.25"], 0.25)):
        out = tmp_path / f"hf-{want}"
        assert cli.main(["export-hf", str(tmp_path / "ours"), "--out", str(out), *extra]) == 0
        assert capsys.readouterr().out == (
            f"exported {tmp_path / 'ours'} to {out}; dropout {want} for fine-tuning (pretrained "
            "with dropout 0.0, dropatt 0.0; --dropout sets it)\n"
        )
        fields = json.loads((out / "config.json").read_text())
        assert (fields["dropout"], fields["dropatt"]) == (want, want)
        assert transformers.XLNetConfig.from_pretrained(out).dropout == want
    assert cli.main(["export-hf", str(tmp_path / "ours"), "--out", str(out), "--dropout=1"]) == 2
    assert capsys.readouterr().err == (
        "xlnet-jax export-hf: error: --dropout must be at least 0 and below 1, got 1.0\n"
    )


def test_shared_biases_replicate_on_export_and_fold_on_import(tmp_path):
    config = ModelConfig(**{**HF_SMALL, "d_head": 8}, untie_r=False)
    rng = np.random.default_rng(0)
    params = {
        k: rng.normal(size=s.shape).astype(np.float32)
        for k, s in flax.traverse_util.flatten_dict(hf.param_shapes(config), sep="/").items()
    }
    params = flax.traverse_util.unflatten_dict(params, sep="/")
    hf.save_params_dir(tmp_path / "ours", config, params)
    hf.export_hf(tmp_path / "ours", tmp_path / "hf")
    untied_config, untied = hf.load_hf(tmp_path / "hf")
    assert untied_config == dataclasses.replace(config, untie_r=True)
    np.testing.assert_array_equal(
        untied["layers"]["attention"]["rel_biases"]["r_s_bias"][1], params["rel_biases"]["r_s_bias"]
    )
    state = hf.params_to_hf(untied_config, untied)
    _assert_same_tree(hf.params_from_hf(state, config), params)
    state["transformer.layer.1.rel_attn.r_w_bias"] = (
        state["transformer.layer.1.rel_attn.r_w_bias"] + 1
    )
    with pytest.raises(ValueError, match="r_w_bias"):
        hf.params_from_hf(state, config)


def _edited_copy(src, dst, **changes):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **changes}))
    return dst


@pytest.mark.parametrize(
    "changes,field",
    [
        (dict(attn_type="uni"), "attn_type"),
        (dict(same_length=True), "same_length"),
        (dict(ff_activation="silu"), "ff_activation"),
        (dict(d_head=4), "d_head"),
    ],
)
def test_unsupported_hf_configs_are_rejected(hf_dir, tmp_path, changes, field):
    with pytest.raises(ValueError, match=field):
        hf.load_hf(_edited_copy(hf_dir[0], tmp_path / "edited", **changes))


def test_missing_files_and_keys_name_the_path(hf_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        hf.load_hf(tmp_path)
    shutil.copy(hf_dir[0] / "config.json", tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        hf.load_hf(tmp_path)
    state = hf.params_to_hf(*hf.load_hf(hf_dir[0]))
    del state["transformer.layer.1.ff.layer_2.bias"]
    with pytest.raises(ValueError, match="layer_2.bias"):
        hf.params_from_hf(state, hf.load_hf(hf_dir[0])[0])
    fields = dataclasses.asdict(hf.load_hf(hf_dir[0])[0])
    (tmp_path / "config.json").write_text(json.dumps({**fields, "n_token": 64}))
    with pytest.raises(ValueError, match="unknown ModelConfig fields"):
        hf.load_params_dir(tmp_path)


def test_pytorch_bin_without_torch_says_so(hf_dir, tmp_path, monkeypatch):
    shutil.copy(hf_dir[0] / "config.json", tmp_path / "config.json")
    torch.save(hf_dir[1].state_dict(), tmp_path / "pytorch_model.bin")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match="needs torch"):
        hf.load_hf(tmp_path)


@pytest.mark.parametrize(
    "argument,value",
    [
        ("input_ids", np.zeros(8, np.int64)),
        ("token_type_ids", np.zeros((2, 7), np.int64)),
        ("perm_mask", np.zeros((2, 8, 7), np.float32)),
        ("target_mapping", np.zeros((2, 2, 7), np.float32)),
        ("target_mapping", np.full((2, 2, 8), 0.5, np.float32)),
        ("mems", [np.zeros((3, 2, 32), np.float32)]),
        ("mems", [np.zeros((3, 2, 16), np.float32)] * 2),
    ],
)
def test_hf_forward_rejects_bad_shapes(hf_dir, argument, value):
    config, params = hf.load_hf(hf_dir[0])
    inputs = {**_hf_inputs(), argument: value}
    with pytest.raises(ValueError, match=argument):
        hf_forward(config, params, **inputs)


def test_export_of_a_seeds_workdir_names_its_seed_folders(tmp_path):
    """`finetune --seeds` writes one run per seed (seed_K) and no checkpoint of its own:
    export-hf says which folders to export, not that config.json is missing (issue 61)."""
    from xlnet_jax.checkpoint.export import export_to_hf
    from xlnet_jax.errors import UsageError

    for seed in (10, 9, 11):
        (tmp_path / "seeds" / f"seed_{seed}" / "checkpoints").mkdir(parents=True)
    with pytest.raises(UsageError) as raised:
        export_to_hf(str(tmp_path / "seeds"), str(tmp_path / "out"))
    assert str(raised.value) == (
        f"{tmp_path}/seeds is a `finetune --seeds` workdir: export one seed's run, e.g. "
        f"`xlnet-jax export-hf {tmp_path}/seeds/seed_9 --out {tmp_path}/out` "
        "(its seed folders: seed_9, seed_10, seed_11)"
    )
