"""Per-field config checks: every field's type, its own range, and finite numbers.

`validate_config` runs `field_problem` before the range and relational checks
(divisibility, block sizes, the mesh), so those never meet a None, a bool or a string
where a number belongs, and `nonfinite_problem` after them, so a NaN or an infinity is
reported with the field's range where a check gives one. Integers must fit in int32:
steps, shapes and seeds become int32 on device, where a larger value wraps without a
word (PRNGKey(2**32) is PRNGKey(0)).
"""

import math
import numbers

import ml_collections

from xlnet_jax.config import DEFAULT_AXIS_RULES, MESH_AXES

INT32_MAX = 2**31 - 1
INT, NUMBER, BOOL, STR, RULES = "integer", "number", "boolean", "string", "axis rules"

# The type every field must have. A field missing here gets no type check; the config
# fuzz test (tests/test_config_fuzz.py) fails until it is added.
KINDS = {
    "vocab_size": INT,
    "d_model": INT,
    "n_layer": INT,
    "n_head": INT,
    "d_head": INT,
    "d_inner": INT,
    "ff_activation": STR,
    "untie_r": BOOL,
    "dropout": NUMBER,
    "dropatt": NUMBER,
    "initializer_range": NUMBER,
    "layer_norm_eps": NUMBER,
    "clamp_len": INT,
    "bi_data": BOOL,
    "dtype": STR,
    "remat": BOOL,
    "scan_unroll": INT,
    "attention_impl": STR,
    "seq_len": INT,
    "reuse_len": INT,
    "mem_len": INT,
    "perm_size": INT,
    "num_predict": INT,
    "mask_alpha": INT,
    "mask_beta": INT,
    "max_span": INT,
    "next_sentence_prob": NUMBER,
    "corpus_dir": STR,
    "data_ranges": INT,
    "batch_size": INT,
    "grad_accum_steps": INT,
    "num_train_steps": INT,
    "learning_rate": NUMBER,
    "warmup_steps": INT,
    "min_lr_ratio": NUMBER,
    "weight_decay": NUMBER,
    "adam_b1": NUMBER,
    "adam_b2": NUMBER,
    "adam_eps": NUMBER,
    "clip_norm": NUMBER,
    "seed": INT,
    "nonfinite_policy": STR,
    "log_every": INT,
    "eval_every": INT,
    "eval_steps": INT,
    "checkpoint_every": INT,
    "keep_checkpoints": INT,
    "peak_tflops_per_device": NUMBER,
    "mesh_data": INT,
    "mesh_fsdp": INT,
    "mesh_tensor": INT,
    "num_slices": INT,
    "logical_axis_rules": RULES,
}

# Ranges of the fields that no relational check covers: (holds, the valid range in words).
RANGES = {
    "layer_norm_eps": (lambda v: 0 < v < 1, "must be a finite number in (0, 1), e.g. 1e-12"),
    "initializer_range": (lambda v: 0 < v <= 1, "must be a finite number in (0, 1], e.g. 0.02"),
    "seed": (
        lambda v: 0 <= v < INT32_MAX,
        f"must be an integer in [0, {INT32_MAX - 1}]; seed + 1 seeds evaluation",
    ),
    "clamp_len": (lambda v: v >= -1, "must be -1 (no clipping) or >= 0"),
}

LOGICAL_AXES = tuple(name for name, _ in DEFAULT_AXIS_RULES)


def _type_ok(kind: str, value) -> bool:
    if isinstance(value, bool):
        return kind == BOOL
    if kind == INT:
        return isinstance(value, numbers.Integral) and abs(value) <= INT32_MAX
    if kind == NUMBER:
        return isinstance(value, numbers.Real)
    if kind == STR:
        return isinstance(value, str)
    return kind == RULES  # the rules' shape is checked by rules_problem


def _kind_words(kind: str) -> str:
    if kind == INT:
        return f"must be an integer of magnitude <= {INT32_MAX} (int32 on device)"
    if kind == BOOL:
        return "must be true or false"
    return f"must be a {kind}"


def _mesh_axes_ok(axes) -> bool:
    if axes is None or axes in MESH_AXES:
        return True
    return (
        isinstance(axes, tuple | list)
        and all(isinstance(a, str) and a in MESH_AXES for a in axes)
        and len(set(axes)) == len(axes)
    )


def rules_problem(rules) -> str | None:
    """What is wrong with logical_axis_rules, or None: a tuple of (logical axis, mesh axes)."""
    shape = (
        f"must be a tuple of (logical axis, mesh axes) pairs, the logical axis one of "
        f"{LOGICAL_AXES}, the mesh axes None, one of {MESH_AXES} or a tuple of distinct ones"
    )
    if not isinstance(rules, tuple | list):
        return shape
    for index, rule in enumerate(rules):
        if not isinstance(rule, tuple | list) or len(rule) != 2:
            return f"rule {index} is not a pair; {shape}"
        name, axes = rule
        if not isinstance(name, str) or name not in LOGICAL_AXES:
            return f"rule {index} names the unknown logical axis {name!r}; {shape}"
        if not _mesh_axes_ok(axes):
            return f"rule {index} maps {name!r} to unknown mesh axes {axes!r}; {shape}"
    return None


def field_problem(c: ml_collections.ConfigDict) -> str | None:
    """The first bad field as one line naming it and its valid range, or None."""
    for name, value in c.items():
        kind = KINDS.get(name)
        if kind is None:
            continue
        if not _type_ok(kind, value):
            words = RANGES[name][1] if name in RANGES else _kind_words(kind)
            return f"config.{name}: {words} (got {value!r})."
        if name in RANGES and not RANGES[name][0](value):
            return f"config.{name}: {RANGES[name][1]} (got {value!r})."
        if kind == RULES and (problem := rules_problem(value)):
            return f"config.{name}: {problem} (got {value!r})."
    return None


def nonfinite_problem(c: ml_collections.ConfigDict) -> str | None:
    """The first number field holding NaN or an infinity, as one line naming it, or None."""
    for name, value in c.items():
        if KINDS.get(name) == NUMBER and not math.isfinite(value):
            return f"config.{name}: must be a finite number (got {value!r})."
    return None
