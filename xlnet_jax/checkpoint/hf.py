"""HuggingFace `XLNetLMHeadModel` import/export, and our own model directory.

Two on-disk formats:
  * HF directory: config.json + model.safetensors (or pytorch_model.bin on import), the layout
    `transformers.XLNetLMHeadModel.from_pretrained` reads.
  * Our params directory: config.json (the ModelConfig fields) + params.safetensors, the
    parameter tree flattened with '/'-joined keys (e.g. "layers/attention/q", stacked over
    layers on the leading axis). Plain safetensors: no pickle, readable without JAX.

Differences from HF that a round trip settles: HF has one dropout for hidden states and
attention probabilities (we write and read our `dropatt` as an extra config key). HF biases
r_w/r_r/r_s are always per layer: with untie_r=False we replicate the shared set on export;
load_hf gives untie_r=True, and params_from_hf folds identical per-layer sets back into one.
HF's mem_len None/0 means "keep everything"; ours 0 means no memory.
"""

import dataclasses
import io
import json
import os
import pickle
import tempfile
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from etils import epath
from flax import traverse_util

from xlnet_jax import paths
from xlnet_jax.checkpoint import hf_tokenizer
from xlnet_jax.checkpoint.hf_qa import QA_HEAD_KEYS
from xlnet_jax.config import ModelConfig
from xlnet_jax.data import spm_source
from xlnet_jax.errors import HFFormatError, MissingFileError
from xlnet_jax.model.xlnet import XLNetLM, validate_model_config

Params = dict
_CONFIG = "config.json"
_HF_SAFETENSORS = "model.safetensors"
_HF_TORCH = "pytorch_model.bin"
_PARAMS = "params.safetensors"
TOKENIZER_FILE = spm_source.SPIECE_FILE
# With it: how HF tokenizes (normalisation settings, the tokenizers pipeline).
_TOKENIZER_FILES = (TOKENIZER_FILE, hf_tokenizer.CONFIG_FILE, hf_tokenizer.JSON_FILE)

# HF key under "transformer.layer.{i}." -> (our path under params["layers"], torch Linear weight?).
_LAYER_KEYS = {
    **{f"rel_attn.{n}": (("attention", n), False) for n in ("q", "k", "v", "o", "r", "seg_embed")},
    "rel_attn.layer_norm.weight": (("attention", "layer_norm", "scale"), False),
    "rel_attn.layer_norm.bias": (("attention", "layer_norm", "bias"), False),
    "ff.layer_1.weight": (("ffn", "layer_1", "kernel"), True),
    "ff.layer_1.bias": (("ffn", "layer_1", "bias"), False),
    "ff.layer_2.weight": (("ffn", "layer_2", "kernel"), True),
    "ff.layer_2.bias": (("ffn", "layer_2", "bias"), False),
    "ff.layer_norm.weight": (("ffn", "layer_norm", "scale"), False),
    "ff.layer_norm.bias": (("ffn", "layer_norm", "bias"), False),
}
_BIASES = ("r_w_bias", "r_r_bias", "r_s_bias")
_TOP_KEYS = {
    "transformer.word_embedding.weight": ("word_embedding", "embedding"),
    "transformer.mask_emb": ("mask_emb",),
    "lm_loss.bias": ("lm_bias",),
}


def _example_inputs(config: ModelConfig):
    """Smallest valid inputs (batch 2 so bi_data halves exist), for shape-only traces."""
    batch = 2
    return (
        jnp.zeros((batch, 1), jnp.int32),
        jnp.zeros((batch, 1), jnp.int32),
        jnp.zeros((batch, 1, 1), bool),
        jnp.zeros((batch, 1), jnp.int32),
        jnp.zeros((config.n_layer, batch, 0, config.d_model), jnp.float32),
    )


def param_shapes(config: ModelConfig) -> Params:
    """The parameter tree of XLNetLM(config) as ShapeDtypeStructs (nothing is allocated)."""
    model = XLNetLM(config)
    abstract = jax.eval_shape(
        lambda: model.init(jax.random.key(0), *_example_inputs(config), deterministic=True)
    )
    return nn.unbox(abstract)["params"]


def _check_tree(config: ModelConfig, params: Params, source: str) -> None:
    """Raises ValueError if `params` does not have exactly the structure and shapes of the model."""
    expected = traverse_util.flatten_dict(param_shapes(config), sep="/")
    got = traverse_util.flatten_dict(params, sep="/")
    if expected.keys() != got.keys():
        missing, extra = sorted(expected.keys() - got.keys()), sorted(got.keys() - expected.keys())
        raise HFFormatError(
            f"{source}: parameters do not match the config: missing {missing}, extra {extra}"
        )
    for key, spec in expected.items():
        if tuple(got[key].shape) != spec.shape:
            raise HFFormatError(
                f"{source}: parameter {key} has shape {got[key].shape}, expected {spec.shape}"
            )


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _get(tree: dict, path: tuple[str, ...]):
    for name in path:
        tree = tree[name]
    return tree


# --- configs -------------------------------------------------------------------------------


def config_from_hf(hf: Mapping, source: str = "HF config") -> ModelConfig:
    """Our ModelConfig from an HF XLNetConfig dict (config.json), rejecting what we do not model.

    Raises:
      ValueError naming the field: attn_type other than "bi", same_length, an activation other
      than gelu/relu, d_head != d_model // n_head.
    """
    if hf.get("attn_type", "bi") != "bi":
        raise HFFormatError(f"{source}: attn_type={hf['attn_type']!r} is not supported (only 'bi')")
    if hf.get("same_length", False):
        raise HFFormatError(f"{source}: same_length=True is not supported")
    d_model, n_head = hf["d_model"], hf["n_head"]
    d_head = hf.get("d_head") or d_model // n_head
    if d_head * n_head != d_model:
        raise HFFormatError(
            f"{source}: d_head ({d_head}) must equal d_model // n_head ({d_model // n_head})"
        )
    config = ModelConfig(
        vocab_size=hf["vocab_size"] if "vocab_size" in hf else hf["n_token"],  # older name
        d_model=d_model,
        n_layer=hf["n_layer"],
        n_head=n_head,
        d_head=d_head,
        d_inner=hf["d_inner"],
        ff_activation=hf.get("ff_activation", "gelu"),
        untie_r=True,
        dropout=hf.get("dropout", 0.1),
        dropatt=hf.get("dropatt", hf.get("dropout", 0.1)),
        initializer_range=hf.get("initializer_range", 0.02),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        clamp_len=hf.get("clamp_len", -1),
        bi_data=hf.get("bi_data", False),
        reuse_len=hf.get("reuse_len") or 0,
        mem_len=hf.get("mem_len") or 0,
    )
    try:
        validate_model_config(config)
    except ValueError as e:
        raise HFFormatError(f"{source}: {e}") from e
    return config


def config_to_hf(config: ModelConfig) -> dict:
    """The config.json of an HF XLNetLMHeadModel with our architecture."""
    validate_model_config(config)
    if config.d_head * config.n_head != config.d_model:
        raise HFFormatError(f"d_head ({config.d_head}) must equal d_model // n_head for HF")
    return {
        "architectures": ["XLNetLMHeadModel"],
        "model_type": "xlnet",
        "vocab_size": config.vocab_size,
        "d_model": config.d_model,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "d_head": config.d_head,
        "d_inner": config.d_inner,
        "ff_activation": config.ff_activation,
        "attn_type": "bi",
        "untie_r": True,
        "dropout": config.dropout,
        "dropatt": config.dropatt,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "clamp_len": config.clamp_len,
        "bi_data": config.bi_data,
        "same_length": False,
        "mem_len": config.mem_len or None,
        "reuse_len": config.reuse_len or None,
        "tie_word_embeddings": True,
    }


# --- parameters ----------------------------------------------------------------------------


def params_from_hf(state: Mapping[str, np.ndarray], config: ModelConfig) -> Params:
    """Our parameter tree from an HF XLNetLMHeadModel state dict (numpy float32 arrays).

    With config.untie_r False, every layer's r_w/r_r/r_s biases must be identical (one set is
    kept). Raises ValueError naming missing keys or mismatched shapes.
    """
    layer_keys = [f"transformer.layer.{i}.{k}" for i in range(config.n_layer) for k in _LAYER_KEYS]
    bias_keys = [
        f"transformer.layer.{i}.rel_attn.{b}" for i in range(config.n_layer) for b in _BIASES
    ]
    missing = [k for k in [*_TOP_KEYS, *layer_keys, *bias_keys] if k not in state]
    if missing:
        raise HFFormatError(f"HF state dict lacks {len(missing)} keys, e.g. {missing[:3]}")
    params: Params = {}
    for key, path in _TOP_KEYS.items():
        _set(params, path, np.asarray(state[key], np.float32))

    def stacked(suffix: str, transpose: bool = False) -> np.ndarray:
        arrays = [
            np.asarray(state[f"transformer.layer.{i}.{suffix}"], np.float32)
            for i in range(config.n_layer)
        ]
        return np.stack([a.T if transpose else a for a in arrays])

    for suffix, (path, transpose) in _LAYER_KEYS.items():
        _set(params, ("layers", *path), stacked(suffix, transpose))
    for name in _BIASES:
        biases = stacked(f"rel_attn.{name}")
        if config.untie_r:
            _set(params, ("layers", "attention", "rel_biases", name), biases)
        elif not (biases == biases[:1]).all():
            raise HFFormatError(
                f"untie_r=False needs identical {name} in every layer of the HF model"
            )
        else:
            _set(params, ("rel_biases", name), biases[0])
    _check_tree(config, params, "HF state dict")
    return params


def params_to_hf(config: ModelConfig, params: Params) -> dict[str, np.ndarray]:
    """The HF XLNetLMHeadModel state dict of our params (lm_loss.weight is tied: not written)."""
    _check_tree(config, params, "params")
    params = jax.device_get(params)
    state = {key: np.asarray(_get(params, path)) for key, path in _TOP_KEYS.items()}
    for i in range(config.n_layer):
        for suffix, (path, transpose) in _LAYER_KEYS.items():
            array = np.asarray(_get(params["layers"], path)[i])
            state[f"transformer.layer.{i}.{suffix}"] = array.T if transpose else array
        for name in _BIASES:
            bias = (
                params["layers"]["attention"]["rel_biases"][name][i]
                if config.untie_r
                else params["rel_biases"][name]
            )
            state[f"transformer.layer.{i}.rel_attn.{name}"] = np.asarray(bias)
    return {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()}


def _read_hf_state(path: epath.Path) -> dict[str, np.ndarray]:
    """The tensors of an HF directory: model.safetensors, else pytorch_model.bin (weights only)."""
    if (path / _HF_SAFETENSORS).exists():
        # bfloat16 tensors load as ml_dtypes.bfloat16 (registered with numpy by jax's import).
        return _load_safetensors(path / _HF_SAFETENSORS)
    if (path / _HF_TORCH).exists():
        try:
            import torch
        except ImportError as e:
            raise ImportError(f"reading {path / _HF_TORCH} needs torch (pip install torch)") from e
        try:
            state = torch.load(
                io.BytesIO((path / _HF_TORCH).read_bytes()), map_location="cpu", weights_only=True
            )
        except pickle.UnpicklingError as e:
            raise HFFormatError(
                f"{path / _HF_TORCH}: refused, it holds objects other than tensors (only "
                "weights_only loads are allowed: unpickling runs code). Convert it to "
                "model.safetensors with a trusted tool."
            ) from e
        return {k: v.float().numpy() for k, v in state.items()}
    raise MissingFileError(f"{path}: neither {_HF_SAFETENSORS} nor {_HF_TORCH} found")


def _load_safetensors(path: epath.Path) -> dict[str, np.ndarray]:
    """A .safetensors file's tensors; a remote one is copied to a local temporary file first
    (safetensors' file reader maps bfloat16, its reader of bytes does not)."""
    if not paths.is_remote(path):
        return safetensors.numpy.load_file(path)
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as local:
        local.write(path.read_bytes())
        local.flush()
        return safetensors.numpy.load_file(local.name)


def _read_json(path: epath.Path) -> dict:
    if not path.exists():
        raise MissingFileError(f"{path} not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise HFFormatError(f"{path}: not valid JSON ({e})") from None


def load_hf(path: str | os.PathLike) -> tuple[ModelConfig, Params]:
    """Reads an HF XLNetLMHeadModel directory into (ModelConfig, params).

    Args:
      path: directory with config.json and model.safetensors or pytorch_model.bin.

    Returns:
      The config (untie_r True, as HF) and the numpy float32 parameter tree of XLNetLM.
    """
    path = paths.as_path(path)
    config = config_from_hf(_read_json(path / _CONFIG), source=str(path / _CONFIG))
    return config, params_from_hf(_read_hf_state(path), config)


def save_hf(
    path: str | os.PathLike, config: ModelConfig, params: Params, dropout: float | None = None
) -> None:
    """Writes config.json + model.safetensors that transformers.XLNetLMHeadModel loads.

    `dropout`, when given, replaces config's dropout and dropatt in config.json: what a
    fine-tuning run of the export starts with (pretraining often runs without).
    """
    path = paths.as_path(path)
    state = params_to_hf(config, params)
    if dropout is not None:
        config = dataclasses.replace(config, dropout=dropout, dropatt=dropout)
    path.mkdir(parents=True, exist_ok=True)
    (path / _CONFIG).write_text(json.dumps(config_to_hf(config), indent=2) + "\n")
    (path / _HF_SAFETENSORS).write_bytes(safetensors.numpy.save(state, metadata={"format": "pt"}))


def save_params_dir(path: str | os.PathLike, config: ModelConfig, params: Params) -> None:
    """Writes our model directory: config.json (ModelConfig fields) + params.safetensors."""
    path = paths.as_path(path)
    _check_tree(config, params, "params")
    flat = traverse_util.flatten_dict(jax.device_get(params), sep="/")
    path.mkdir(parents=True, exist_ok=True)
    (path / _CONFIG).write_text(json.dumps(dataclasses.asdict(config), indent=2) + "\n")
    arrays = {k: np.ascontiguousarray(v, np.float32) for k, v in flat.items()}
    (path / _PARAMS).write_bytes(safetensors.numpy.save(arrays))


def load_params_dir(path: str | os.PathLike) -> tuple[ModelConfig, Params]:
    """Reads a directory written by save_params_dir into (ModelConfig, numpy params)."""
    path = paths.as_path(path)
    fields = _read_json(path / _CONFIG)
    unknown = set(fields) - {f.name for f in dataclasses.fields(ModelConfig)}
    if unknown:
        raise HFFormatError(f"{path / _CONFIG}: unknown ModelConfig fields {sorted(unknown)}")
    config = ModelConfig(**fields)
    if not (path / _PARAMS).exists():
        raise MissingFileError(f"{path / _PARAMS} not found")
    params = traverse_util.unflatten_dict(_load_safetensors(path / _PARAMS), sep="/")
    _check_tree(config, params, str(path / _PARAMS))
    return config, params


def import_hf(src: str | os.PathLike, out: str | os.PathLike) -> ModelConfig:
    """`xlnet-jax import-hf SRC --out DIR`: HF directory -> our params directory."""
    config, params = load_hf(src)
    save_params_dir(out, config, params)
    _copy_tokenizer(src, out)
    return config


def export_hf(
    src_params_dir: str | os.PathLike, out: str | os.PathLike, dropout: float | None = None
) -> ModelConfig:
    """`xlnet-jax export-hf SRC --out DIR`: our params directory -> HF directory (with
    `dropout` in its config.json when given, as save_hf); returns SRC's config."""
    config, params = load_params_dir(src_params_dir)
    save_hf(out, config, params, dropout)
    _copy_tokenizer(src_params_dir, out)
    return config


def _copy_tokenizer(src: str | os.PathLike, out: str | os.PathLike) -> None:
    """Carries SRC's spiece.model and its HF tokenizer settings along, so `train --init_from
    OUT` can check the corpus's tokenizer and normalisation, and an export keeps them."""
    for name in _TOKENIZER_FILES:
        tokenizer = paths.as_path(src) / name
        if tokenizer.is_file():
            tokenizer.copy(paths.as_path(out) / name, overwrite=True)


# --- fine-tuning heads ---------------------------------------------------------------------

# In a fine-tuning workdir: {"task", "head" (a key of HEADS), "labels", ...}, written by
# the run, read by export-hf to write the head.
FINETUNE_FILE = "finetune.json"

# The parameters XLNetLM has and the encoder (model/encoder.py) does not.
_LM_ONLY = ("mask_emb", "lm_bias")


@dataclasses.dataclass(frozen=True)
class HeadMapping:
    """How one of our task heads is written for HF: the class that loads it, each HF key ->
    (our path under the head's params, torch Linear weight, i.e. transposed?), and the run's
    config fields that class reads from config.json under the same names."""

    hf_class: str
    keys: Mapping[str, tuple[tuple[str, ...], bool]]
    config_fields: tuple[str, ...] = ()


_SEQUENCE_SUMMARY_KEYS = {
    "sequence_summary.summary.weight": (("sequence_summary", "summary", "kernel"), True),
    "sequence_summary.summary.bias": (("sequence_summary", "summary", "bias"), False),
    "logits_proj.weight": (("logits_proj", "kernel"), True),
    "logits_proj.bias": (("logits_proj", "bias"), False),
}
# Head name (a fine-tuning task's `head`) -> its HF mapping. A new head adds one entry.
HEADS = {
    "classification": HeadMapping("XLNetForSequenceClassification", _SEQUENCE_SUMMARY_KEYS),
    "regression": HeadMapping("XLNetForSequenceClassification", _SEQUENCE_SUMMARY_KEYS),
    "multiple_choice": HeadMapping("XLNetForMultipleChoice", _SEQUENCE_SUMMARY_KEYS),
    "question_answering": HeadMapping(
        "XLNetForQuestionAnswering", QA_HEAD_KEYS, ("start_n_top", "end_n_top")
    ),
}


def encoder_params(lm_params: Params) -> Params:
    """The encoder's parameters (model/encoder.py) out of XLNetLM's: all but mask_emb, lm_bias."""
    return {k: v for k, v in lm_params.items() if k not in _LM_ONLY}


def _head_mapping(head: str) -> HeadMapping:
    if head not in HEADS:
        raise HFFormatError(f"head {head!r} has no HF mapping; known: {sorted(HEADS)}")
    return HEADS[head]


def head_params_to_hf(config: ModelConfig, params: Params, head: str) -> dict[str, np.ndarray]:
    """The HF state dict of a fine-tuned model ({"transformer": encoder params, head params}),
    for HEADS[head].hf_class. transformer.mask_emb, unused by the task classes' forward, is
    written as zeros."""
    params = jax.device_get(params)
    lm = {
        **params["transformer"],
        "mask_emb": np.zeros((1, 1, config.d_model), np.float32),
        "lm_bias": np.zeros((config.vocab_size,), np.float32),
    }
    state = params_to_hf(config, lm)
    del state["lm_loss.bias"]
    for key, (path, transpose) in _head_mapping(head).keys.items():
        array = np.asarray(_get(params, path), np.float32)
        state[key] = np.ascontiguousarray(array.T if transpose else array)
    return state


def head_params_from_hf(state: Mapping[str, np.ndarray], config: ModelConfig, head: str) -> Params:
    """The inverse of head_params_to_hf: our fine-tuned model's params from HF's state dict."""
    lm_state = {"lm_loss.bias": np.zeros((config.vocab_size,), np.float32), **state}
    params: Params = {"transformer": encoder_params(params_from_hf(lm_state, config))}
    for key, (path, transpose) in _head_mapping(head).keys.items():
        if key not in state:
            raise HFFormatError(f"HF state dict lacks the {head} head's {key}")
        array = np.asarray(state[key], np.float32)
        _set(params, path, array.T if transpose else array)
    return params


def save_hf_head(
    path: str | os.PathLike,
    config: ModelConfig,
    params: Params,
    head: str,
    labels: list[str],
    run_config: Mapping[str, Any] | None = None,
) -> None:
    """Writes config.json + model.safetensors that HEADS[head].hf_class loads, with `labels`
    (the task's label names; one name for regression and multiple choice) as id2label, and
    the head's config_fields from `run_config` (the fine-tuning run's config: SQuAD's
    start_n_top and end_n_top), so that the HF class evaluates as the run did."""
    path = paths.as_path(path)
    mapping = _head_mapping(head)
    run_config = run_config or {}
    missing = [name for name in mapping.config_fields if name not in run_config]
    if missing:
        raise HFFormatError(f"the {head} head's export needs the run's config fields {missing}")
    state = head_params_to_hf(config, params, head)
    hf_config = config_to_hf(config)
    hf_config["architectures"] = [mapping.hf_class]
    hf_config.update({name: run_config[name] for name in mapping.config_fields})
    hf_config["id2label"] = {str(i): name for i, name in enumerate(labels)}
    hf_config["label2id"] = {name: i for i, name in enumerate(labels)}
    hf_config["summary_type"] = "last"
    hf_config["summary_use_proj"] = True
    hf_config["summary_activation"] = "tanh"
    hf_config["summary_last_dropout"] = config.dropout
    if head == "regression":
        hf_config["problem_type"] = "regression"
    path.mkdir(parents=True, exist_ok=True)
    (path / _CONFIG).write_text(json.dumps(hf_config, indent=2) + "\n")
    (path / _HF_SAFETENSORS).write_bytes(safetensors.numpy.save(state, metadata={"format": "pt"}))
