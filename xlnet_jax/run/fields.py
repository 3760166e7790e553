"""Per-field config checks: every field's type, its own range, and finite numbers.

Kinds and ranges are read off the declaration table (xlnet_jax/config/fields.py).
`validate_config` runs `field_problem` before the relations between fields (divisibility,
block sizes, the mesh), so those never meet a None, a bool or a string where a number
belongs, and `nonfinite_problem` after them, so a NaN or an infinity is reported with the
field's range where a check gives one. Integers must fit in int32: steps, shapes and seeds
become int32 on device, where a larger value wraps without a word (PRNGKey(2**32) is
PRNGKey(0)).
"""

import math

import ml_collections

from xlnet_jax.config import BY_NAME, DEFAULT_AXIS_RULES, FIELDS, MESH_AXES
from xlnet_jax.config.declare import NUMBER, RULES, value_problem

# The type every field must have.
KINDS = {field.name: field.kind for field in FIELDS}

LOGICAL_AXES = tuple(name for name, _ in DEFAULT_AXIS_RULES)


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
        field = BY_NAME.get(name)
        if field is None:
            continue
        if problem := value_problem(field, value):
            return f"config.{name}: {problem}."
        if field.kind == RULES and (problem := rules_problem(value)):
            return f"config.{name}: {problem} (got {value!r})."
    return None


def nonfinite_problem(c: ml_collections.ConfigDict) -> str | None:
    """The first number field holding NaN or an infinity, as one line naming it, or None."""
    for name, value in c.items():
        if KINDS.get(name) == NUMBER and not math.isfinite(value):
            return f"config.{name}: must be a finite number (got {value!r})."
    return None
