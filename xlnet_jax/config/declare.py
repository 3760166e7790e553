"""What a config field is: a `Field` record, the kinds of value, and the views built from them.

Every field of the config is one `Field` in config/fields.py. The type and range checks
(run/fields.py), `default_config()`, the model's and the objective's frozen views, the
architecture and schedule field lists, the fill-in of a config.json saved before a field
existed and the manual's config reference are all read off those records.
"""

import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

INT32_MAX = 2**31 - 1
INT, NUMBER, BOOL, STR, RULES = "integer", "number", "boolean", "string", "axis rules"
PYTHON_TYPES = {INT: int, NUMBER: float, BOOL: bool, STR: str, RULES: tuple}

# Tags a field may carry; each names a list other modules read off the table.
ARCHITECTURE = "architecture"  # fixes the parameter shapes or the function they compute
SCHEDULE = "schedule"  # moves the learning rate of the steps still to come

REQUIRED = object()  # a view made without a config must be given this field
SAME = object()  # a view made without a config takes the field's default


@dataclasses.dataclass(frozen=True)
class Range:
    """A field's own valid values: `holds(value)`, and those values in words ("must be ...")."""

    holds: Callable[[Any], bool]
    words: str


def at_least(low: float, note: str = "") -> Range:
    return Range(lambda v: v >= low, f"must be >= {low:g}{note}")


def above(low: float, note: str = "") -> Range:
    return Range(lambda v: v > low, f"must be > {low:g}{note}")


def one_of(*choices: str) -> Range:
    return Range(lambda v: v in choices, f"must be one of {list(choices)}")


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field, declared once.

    Attributes:
      name: the ConfigDict key (`--config.NAME=VALUE`).
      kind: INT, NUMBER, BOOL, STR or RULES; INT values must fit in int32.
      default: the value `default_config()` gives it.
      part: the part of the program it belongs to, a key of fields.PARTS.
      doc: one line for the manual's config reference.
      range: its own valid values, checked after its kind; relations between fields are
        config/checks.py's.
      tags: ARCHITECTURE, SCHEDULE: the lists of fields with a rule of their own.
      standalone: what its part's view takes when made without a config (a test, an HF
        import): REQUIRED (it must be given), SAME (the default) or a value.
      views: the other views that hold it ("model", "objective"), each with what it takes
        there when made without a config.
      saved_before: what a config.json saved before the field existed means.
    """

    name: str
    kind: str
    default: Any
    part: str
    doc: str
    range: Range | None = None
    tags: frozenset[str] = frozenset()
    standalone: Any = SAME
    views: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    saved_before: Any = SAME

    def in_view(self, view: str) -> bool:
        return self.part == view or view in self.views

    def standalone_in(self, view: str) -> Any:
        """What view `view` takes for this field when made without a config."""
        value = self.standalone if self.part == view else self.views[view]
        return self.default if value is SAME else value

    @property
    def legacy(self) -> Any:
        """The value of this field in a config saved before it existed."""
        return self.default if self.saved_before is SAME else self.saved_before


def type_ok(kind: str, value) -> bool:
    """Whether `value` has the kind (a bool is only a BOOL; an INT fits in int32)."""
    if isinstance(value, bool):
        return kind == BOOL
    if kind == INT:
        return isinstance(value, numbers.Integral) and abs(value) <= INT32_MAX
    if kind == NUMBER:
        return isinstance(value, numbers.Real)
    if kind == STR:
        return isinstance(value, str)
    return kind == RULES  # the rules' shape is checked by run/fields.rules_problem


def kind_words(kind: str) -> str:
    if kind == INT:
        return f"must be an integer of magnitude <= {INT32_MAX} (int32 on device)"
    if kind == BOOL:
        return "must be true or false"
    return f"must be a {kind}"


def value_problem(field: Field, value) -> str | None:
    """What is wrong with `value` for `field` alone, as 'must be ... (got V)', or None.

    A NaN or an infinity in a NUMBER field without a range is left to the caller, which
    reports it after the relations between fields (run/fields.nonfinite_problem).
    """
    if not type_ok(field.kind, value):
        words = field.range.words if field.range else kind_words(field.kind)
        return f"{words} (got {value!r})"
    if field.range and not field.range.holds(value):
        return f"{field.range.words} (got {value!r})"
    return None


def finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def view(name: str, part: str, fields: Iterable[Field], doc: str, module: str) -> type:
    """A frozen, hashable dataclass of the fields in view `part`, in table order, with
    `from_config(config)` picking them out of the whole ConfigDict."""
    specs = []
    for field in (f for f in fields if f.in_view(part)):
        annotation = PYTHON_TYPES[field.kind]
        value = field.standalone_in(part)
        if value is REQUIRED:
            specs.append((field.name, annotation))
        else:
            specs.append((field.name, annotation, dataclasses.field(default=value)))

    def from_config(cls, config):
        return cls(**{f.name: config[f.name] for f in dataclasses.fields(cls)})

    from_config.__doc__ = f"Picks the {part} fields out of the full (ml_collections) config."
    cls = dataclasses.make_dataclass(
        name, specs, frozen=True, namespace={"from_config": classmethod(from_config)}
    )
    cls.__doc__, cls.__module__ = doc, module
    return cls
