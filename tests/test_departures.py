"""The list of every remaining difference from the original (docs/fine-tuning.md, section
"Every remaining difference from the original", included by docs/correctness.md) against
the config: each option it names is a field that accepts the value, and each option field
that undoes a difference is on the list."""

import pathlib
import re

from xlnet_jax.config.declare import value_problem
from xlnet_jax.config.fields import BY_NAME

REPO = pathlib.Path(__file__).resolve().parents[1]
START, END = "<!-- --8<-- [start:departures] -->", "<!-- --8<-- [end:departures] -->"
OPTION = re.compile(r"--config\.(\w+)=([\w.]+)")

# The fields that make a difference from the original, or undo one: each must be named.
UNDOING = {
    "race_rows", "ff_activation", "pretrain_adam_variant", "pretrain_clip_replicas",
    "adam_variant", "clip_scope", "clip_replicas", "squad_postprocess", "dtype",
}  # fmt: skip


def _departures() -> str:
    page = (REPO / "docs/fine-tuning.md").read_text()
    assert page.count(START) == 1 and page.count(END) == 1
    return page[page.index(START) : page.index(END)]


def _value(field, text: str):
    kind = type(field.default)
    return kind(text) if kind in (int, float) else text


def test_every_option_on_the_list_is_a_field_that_takes_the_value():
    options = OPTION.findall(_departures())
    assert len(options) >= len(UNDOING)
    for name, text in options:
        assert name in BY_NAME, f"docs/fine-tuning.md names --config.{name}: no such field"
        field = BY_NAME[name]
        assert value_problem(field, _value(field, text)) is None, (name, text)


def test_every_undoing_option_is_on_the_list_and_the_correctness_page_includes_it():
    named = {name for name, _ in OPTION.findall(_departures())}
    assert UNDOING <= named, sorted(UNDOING - named)
    correctness = (REPO / "docs/correctness.md").read_text()
    assert '--8<-- "docs/fine-tuning.md:departures"' in correctness
