"""Every config field, fed values derived from its type and meaning, is either rejected in
one line naming it (before anything compiles) or listed here as valid, with the reason.

The check is what `xlnet-jax train` runs before it builds anything: validate_config on 8
devices, then the corpus manifest against the config. A new field of default_config()
without an entry in FIELDS fails test_every_field_has_an_entry.
"""

import dataclasses
import os
import random
import re

import pytest

from tests.test_data_common import scratch, small_corpus
from xlnet_jax.config import default_config
from xlnet_jax.run.fields import KINDS
from xlnet_jax.run.preflight import check_run
from xlnet_jax.run.validate import ConfigError, validate_config

DEVICES = 8
NAN, INF = float("nan"), float("inf")

# Invalid candidates derived from the type of a field's default value. (A bool assigned
# to a float field is stored as 0.0 or 1.0 by ConfigDict, so floats get no bool.)
BY_TYPE = {
    int: (NAN, INF, -INF, -1, 0, 2**40, -(2**40), 1.5, "8", "", None, True),
    float: (NAN, INF, -INF, -1.0, 0.0, 1e30, "0.1", "", None),
    bool: (0, 1, "true", "", None, NAN),
    str: ("", "no-such-value", 1, None, NAN, b"float32"),
    tuple: (
        "foo",
        ("foo",),
        (("batch",),),
        (("batch", "nope"),),
        (("nope", "data"),),
        ((1, None),),
        (("batch", ("data", "data")),),
        None,
        1,
        (),
    ),
}

NO_CLIP = "no upper bound: a value that diverges is stopped by the non-finite guard"


@dataclasses.dataclass(frozen=True)
class Entry:
    """A field's accepted values among the candidates (value, reason) and extra bad ones."""

    valid: tuple = ()
    invalid: tuple = ()


def _empty_dir() -> str:
    return scratch("empty-corpus-dir")


def _a_file() -> str:
    path = os.path.join(scratch("a-file"), "corpus.txt")
    with open(path, "w") as f:
        f.write("text\n")
    return path


FIELDS = {
    "vocab_size": Entry(invalid=(8, 499, 501, 32000)),  # must equal the corpus's 500
    "d_model": Entry(invalid=(130, 127)),  # n_head=4 must divide it; it must be even
    "n_layer": Entry(),
    "n_head": Entry(invalid=(5,)),
    "d_head": Entry(),
    "d_inner": Entry(),
    "ff_activation": Entry(invalid=("swish", "GELU")),
    "untie_r": Entry(),
    "dropout": Entry(valid=((0.0, "no dropout"),), invalid=(1.0,)),
    "dropatt": Entry(valid=((0.0, "no attention dropout"),), invalid=(1.0,)),
    "initializer_range": Entry(invalid=(2.0,)),
    "layer_norm_eps": Entry(invalid=(1.0,)),
    "clamp_len": Entry(
        valid=((-1, "keeps every distance (the default)"), (0, "only > 0 clips, as in HF")),
        invalid=(-2,),
    ),
    "bi_data": Entry(),
    "dtype": Entry(invalid=("float16", "bf16")),
    "remat": Entry(),
    "scan_unroll": Entry(),
    "attention_impl": Entry(invalid=("XLA", "flash")),
    "seq_len": Entry(invalid=(3, 64)),  # reuse_len=64 must leave room for A <sep> B <sep> <cls>
    "reuse_len": Entry(valid=((0, "no reuse block: every token is new"),), invalid=(125, 30)),
    "mem_len": Entry(valid=((0, "disables the memory"),)),
    "perm_size": Entry(invalid=(12, 128)),
    "num_predict": Entry(invalid=(200,)),
    "mask_alpha": Entry(),
    "mask_beta": Entry(),
    "max_span": Entry(),
    "next_sentence_prob": Entry(valid=((0.0, "B is always a random sentence"),), invalid=(1.5,)),
    "corpus_dir": Entry(invalid=(_empty_dir, _a_file, "/nonexistent/corpus")),
    # One corpus here: a weight or an alpha is valid and changes nothing (test_data_mixture.py)
    "corpus_weights": Entry(
        valid=(
            ("", "no weights: by token counts (the default)"),
            ("2", "one weight for the one corpus: its share is 1"),
        ),
        invalid=("0", "-1", "1,1", "nan", "inf", "3;1"),
    ),
    "corpus_alpha": Entry(
        valid=((0.0, "not used (the default)"), (0.3, "XLM-R's temperature: one corpus, share 1")),
        invalid=(1.5,),
    ),
    "data_ranges": Entry(
        valid=((0, "the process count when the run starts (the default)"),),
        invalid=(3, 32),  # must divide the 16 streams of a batch
    ),
    "batch_size": Entry(invalid=(12, 6)),  # must divide over 8 data shards
    "grad_accum_steps": Entry(invalid=(3,)),
    "num_train_steps": Entry(invalid=(29,)),  # below warmup_steps=30
    "learning_rate": Entry(valid=((1e30, NO_CLIP),)),
    "warmup_steps": Entry(valid=((0, "no warmup"),), invalid=(301,)),
    "min_lr_ratio": Entry(valid=((0.0, "decays to zero"),), invalid=(1.5,)),
    "weight_decay": Entry(valid=((0.0, "no weight decay"), (1e30, NO_CLIP))),
    "adam_b1": Entry(valid=((0.0, "no first-moment averaging: legal Adam"),), invalid=(1.0,)),
    "adam_b2": Entry(valid=((0.0, "no second-moment averaging: legal Adam"),), invalid=(1.0,)),
    "adam_eps": Entry(valid=((1e30, "a large epsilon only shrinks the update"),)),
    "clip_norm": Entry(valid=((0.0, "disables clipping"), (1e30, "never clips"))),
    "seed": Entry(valid=((0, "the default"),), invalid=(2**31 - 1,)),
    "nonfinite_policy": Entry(invalid=("ignore", "Skip")),
    "log_every": Entry(),
    "eval_every": Entry(valid=((0, "disables evaluation"),)),
    "eval_steps": Entry(),
    "checkpoint_every": Entry(),
    "keep_checkpoints": Entry(),
    "save_wait_s": Entry(),
    "failed_saves": Entry(),
    "metrics_wait_s": Entry(valid=((0.0, "does not wait for the metrics' upload"),)),
    "peak_tflops_per_device": Entry(
        valid=((1e30, "only the MFU denominator"), (0.0, "the device's datasheet peak"))
    ),
    "mesh_data": Entry(valid=((-1, "fills the remaining devices (the default)"),), invalid=(3,)),
    "mesh_fsdp": Entry(invalid=(3,)),  # -1 is refused too: mesh_data is already -1
    "mesh_tensor": Entry(invalid=(3, 8)),  # 8 does not divide n_head=4
    "num_slices": Entry(),
    "num_segments": Entry(),
    "mem_gradient": Entry(),
    "max_qa_length": Entry(),
    "lr_layer_decay_rate": Entry(invalid=(1.5,)),
    "lr_layer_decay_mode": Entry(invalid=("layer",)),
    "adam_variant": Entry(invalid=("adam",)),
    "clip_scope": Entry(invalid=("host",)),
    "clip_replicas": Entry(valid=((0, "the mesh's data-parallel devices (the default)"),)),
    "race_rows": Entry(invalid=("original",)),
    "squad_postprocess": Entry(invalid=("hf",)),
    "pretrain_adam_variant": Entry(invalid=("adam",)),
    "pretrain_clip_replicas": Entry(valid=((0, "one global clip (the default)"),)),
    "answer_class_start": Entry(invalid=("start",)),
    "squad_version": Entry(valid=(("", "the default: told from the data files"),)),
    "doc_stride": Entry(),
    "max_query_length": Entry(),
    "start_n_top": Entry(),
    "end_n_top": Entry(),
    "n_best_size": Entry(),
    "max_answer_length": Entry(),
    "logical_axis_rules": Entry(
        valid=(((), "no rules: every array replicated, as flax allows"),),
        invalid=((("batch", "data"), "embed"), [("vocab", ("tensor", "nope"))]),
    ),
}


def base_config():
    """default_config() on the test corpus (500 pieces), as `train` would see it."""
    c = default_config()
    c.vocab_size = 500
    c.corpus_dir = small_corpus()
    return c


def with_values(**values):
    c = base_config()
    with c.ignore_type():
        for name, value in values.items():
            c[name] = value() if callable(value) else value
    return c


def rejection(c) -> str | None:
    """The one-line message `train` would stop with before compiling, or None if it passes."""
    try:
        validate_config(c, DEVICES)
        check_run(c, DEVICES, evaluates=False)
    except ConfigError as e:
        return str(e)
    return None


def _key(value) -> tuple:
    return type(value), repr(value)


def candidates(name: str) -> list:
    """Values of one field to try: derived from its default's type, plus its own extras."""
    entry = FIELDS[name]
    values = list(BY_TYPE[type(default_config()[name])]) + list(entry.invalid)
    return values + [value for value, _ in entry.valid]


def is_valid(name: str, value) -> bool:
    return _key(value) in {_key(v) for v, _ in FIELDS[name].valid}


def names(message: str, *fields: str) -> bool:
    """Whether the message is one line of a config error that names one of the fields."""
    return (
        "\n" not in message
        and message.startswith("config.")
        and any(re.search(rf"\b{field}\b", message) for field in fields)
    )


def test_every_field_has_an_entry():
    missing = sorted(set(default_config().keys()) - set(FIELDS))
    assert not missing, f"add an entry to FIELDS for each new config field: {missing}"
    untyped = sorted(set(default_config().keys()) - set(KINDS))
    assert not untyped, f"add each new config field to validate_fields.KINDS: {untyped}"


def test_the_base_config_passes():
    assert rejection(base_config()) is None


@pytest.mark.parametrize("name", sorted(default_config().keys()))
def test_each_value_is_rejected_naming_the_field_or_listed_valid(name):
    assert name in FIELDS, f"config.{name} has no entry in FIELDS"
    for value in candidates(name):
        message = rejection(with_values(**{name: value}))
        if is_valid(name, value):
            assert message is None, f"{name}={value!r} is listed valid but: {message}"
        else:
            assert message is not None, f"{name}={value!r} was accepted"
            assert names(message, name), f"{name}={value!r}: {message}"


def test_random_pairs_are_rejected_naming_one_of_them():
    """Two fields at once: never a crash, and a bad one is always named (or the pair is)."""
    rng = random.Random(18)
    fields = sorted(default_config().keys())
    for _ in range(400):
        a, b = rng.sample(fields, 2)
        value_a, value_b = rng.choice(candidates(a)), rng.choice(candidates(b))
        message = rejection(with_values(**{a: value_a, b: value_b}))
        label = f"{a}={value_a!r}, {b}={value_b!r}"
        if is_valid(a, value_a) and is_valid(b, value_b):
            assert message is None or names(message, a, b), f"{label}: {message}"
        else:
            assert message is not None, f"{label} was accepted"
            assert names(message, a, b), f"{label}: {message}"
