"""Fine-tuning inputs, damaged as real files get damaged, in every layout the readers take.

Each layout (the nine GLUE tasks, `classification` with single texts and with pairs,
`regression`, RACE, SQuAD) starts from a small valid file; each damage (an encoding, a
line ending, a byte-order mark, a character that str.splitlines treats as a line end, a
stray header, a short or long line, trailing tabs, a non-finite score, broken or
non-standard JSON, wrong field types, ...) expects one of two things:
- a correct result: the examples read equal those of the undamaged file (up to the
  characters the damage put inside a text, which stay there as text);
- one line naming the file, and the line where a line is at fault.
Generated files (random texts of awkward characters, random line endings) must read back
exactly, and a byte that is not UTF-8 put anywhere in them must be named by its line and
byte offset. Only the readers and the featurizer run: no model, no training.
"""

import dataclasses
import json
import random
from collections.abc import Callable

import ml_collections
import pytest

from tests.test_finetune_tasks import GLUE_FILES
from xlnet_jax.data import tokenizer
from xlnet_jax.errors import DataError, MissingFileError
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.squad import reading
from xlnet_jax.finetune.text import TextEncoder

# Characters that are text, though str.splitlines() ends a line at all but the last three.
INSIDE = (
    "\x85",
    "\u2028",
    "\u2029",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1d",
    "\x1e",
    "\r",
    '"',
    "\x00",
    "\ufeff",
)


@dataclasses.dataclass(frozen=True)
class Same:
    """The examples of the undamaged file, `inside` removed from the texts read."""

    inside: str = ""


@dataclasses.dataclass(frozen=True)
class Dropped:
    """The undamaged file's examples but the one at `row`, and a printed note."""

    row: int
    note: str


@dataclasses.dataclass(frozen=True)
class Refused:
    """One line naming the file (at `line` when not None) and holding `says`."""

    line: int | None
    says: str
    offset: int | None = None  # the byte offset named, for bytes that are not UTF-8


# ---------------------------------------------------------------- tab-separated layouts


@dataclasses.dataclass(frozen=True)
class TsvLayout:
    """A TSV layout: its task, train.tsv's header and data lines, the text column (where a
    damage puts characters) and the label column."""

    task: str
    header: str | None
    lines: tuple[str, ...]
    text: int
    label: int

    @property
    def first_data_line(self) -> int:
        return 2 if self.header is not None else 1

    @property
    def glue(self) -> bool:
        return self.task not in ("classification", "regression")

    @property
    def regression(self) -> bool:
        return self.task in ("regression", "sts-b")


# GLUE train files: (text column, label column) as the GLUE distribution lays them out.
GLUE_COLUMNS = {
    "cola": (3, 1),
    "sst-2": (0, 1),
    "mrpc": (3, 0),
    "sts-b": (7, -1),
    "qqp": (3, 5),
    "mnli": (8, -1),
    "qnli": (1, 3),
    "rte": (1, 3),
    "wnli": (1, 3),
}


def _glue_layout(name: str) -> TsvLayout:
    """GLUE_FILES' train.tsv of the task, its data lines three times over."""
    text = GLUE_FILES[name]["train.tsv"].splitlines()
    header = text[0] if name != "cola" else None  # CoLA's train file has no header
    lines = text[1:] if header is not None else text
    return TsvLayout(name, header, tuple(lines * 3), *GLUE_COLUMNS[name])


def _generic_lines(pairs: bool, scores: bool) -> tuple[str, ...]:
    lines = []
    for i in range(12):
        label = f"{i * 0.25 - 1:g}" if scores else ("pos", "neg")[i % 2]
        text = f"a film number {i} here"
        lines.append(f"{label}\t{text}\tand its twin {i}" if pairs else f"{label}\t{text}")
    return tuple(lines)


TSV_LAYOUTS = {
    **{name: _glue_layout(name) for name in GLUE_COLUMNS},
    "classification": TsvLayout("classification", None, _generic_lines(False, False), 1, 0),
    "classification-pairs": TsvLayout("classification", None, _generic_lines(True, False), 1, 0),
    "regression": TsvLayout("regression", None, _generic_lines(True, True), 1, 0),
}
TARGET = 1  # the data row a damage hits: the second, so a good one comes first


def _with(fields: list[str], column: int, value: str) -> list[str]:
    fields = list(fields)
    fields[column] = value
    return fields


def _join(layout: TsvLayout, lines: list[str], end: str = "\n") -> bytes:
    head = [layout.header] if layout.header is not None else []
    return "".join(line + end for line in head + lines).encode()


def _target_line(layout: TsvLayout) -> int:
    return layout.first_data_line + TARGET


def _refused_byte(data: bytes, bad: bytes) -> Refused:
    offset = data.index(bad)
    return Refused(data[:offset].count(b"\n") + 1, "is not UTF-8", offset)


def _in_text(layout: TsvLayout, char: str) -> tuple[bytes, object]:
    lines = list(layout.lines)
    fields = lines[TARGET].split("\t")
    text = fields[layout.text]
    middle = len(text) // 2
    lines[TARGET] = "\t".join(_with(fields, layout.text, text[:middle] + char + text[middle:]))
    return _join(layout, lines), Same(char)


def _label(layout: TsvLayout, value: str, says: str) -> tuple[bytes, object]:
    lines = list(layout.lines)
    lines[TARGET] = "\t".join(_with(lines[TARGET].split("\t"), layout.label, value))
    return _join(layout, lines), Refused(_target_line(layout), says)


def _latin1(layout: TsvLayout) -> tuple[bytes, object]:
    lines = list(layout.lines)
    fields = lines[TARGET].split("\t")
    data = _join(
        layout,
        lines[:TARGET] + ["\t".join(_with(fields, layout.text, "caf\x00"))] + lines[TARGET + 1 :],
    ).replace(b"\x00", b"\xe9")
    return data, _refused_byte(data, b"\xe9")


def _short(layout: TsvLayout) -> tuple[bytes, object]:
    lines = list(layout.lines)
    lines[TARGET] = lines[TARGET].split("\t")[0]
    if layout.glue:
        return _join(layout, lines), Dropped(TARGET, "skipped 1 line(s) with fewer than")
    return _join(layout, lines), Refused(_target_line(layout), "1 tab-separated columns")


def _all_short(layout: TsvLayout) -> tuple[bytes, object]:
    lines = [line.split("\t")[0] for line in layout.lines]
    return _join(layout, lines), Refused(layout.first_data_line, "tab-separated columns")


def _mac(layout: TsvLayout) -> tuple[bytes, object]:
    data = _join(layout, list(layout.lines), end="\r")
    if layout.header is not None:  # one line: the header, and no data
        return data, Refused(None, "no data lines")
    return data, Refused(1, "tab-separated columns")


def _utf16(layout: TsvLayout) -> tuple[bytes, object]:
    data = _join(layout, list(layout.lines)).decode().encode("utf-16")
    return data, Refused(1, "byte 0xff at byte offset 0 is not UTF-8", 0)


def _truncated(layout: TsvLayout) -> tuple[bytes, object]:
    data = _join(layout, list(layout.lines)) + "é".encode()[:1]
    return data, Refused(data.count(b"\n") + 1, "is not UTF-8", len(data) - 1)


def _tabs(layout: TsvLayout) -> int:
    return layout.lines[0].count("\t")


def _prepend(layout: TsvLayout, line: str, outcome: Refused) -> tuple[bytes, object]:
    return line.encode() + b"\n" + _join(layout, list(layout.lines)), outcome


def _retarget(layout: TsvLayout, tail: str, says: str) -> tuple[bytes, object]:
    """The target line with `tail` appended: refused at its line."""
    lines = list(layout.lines)
    lines[TARGET] += tail
    return _join(layout, lines), Refused(_target_line(layout), says)


TSV_DAMAGES: dict[str, Callable[[TsvLayout], tuple[bytes, object] | None]] = {
    "bom": lambda lay: (b"\xef\xbb\xbf" + _join(lay, list(lay.lines)), Same()),
    "crlf": lambda lay: (_join(lay, list(lay.lines), end="\r\n"), Same()),
    "no-final-newline": lambda lay: (_join(lay, list(lay.lines))[:-1], Same()),
    "bom-and-crlf": lambda lay: (
        b"\xef\xbb\xbf" + _join(lay, list(lay.lines), end="\r\n"),
        Same(),
    ),
    "blank-lines": lambda lay: (
        _join(lay, [line for x in lay.lines for line in (x, "", " \t ")]),
        Same(),
    ),
    **{f"inside-U+{ord(c):04X}": (lambda lay, c=c: _in_text(lay, c)) for c in INSIDE},
    "latin1-byte": _latin1,
    "utf16-file": _utf16,
    "cut-utf8-at-end": _truncated,
    "extra-column": lambda lay: _retarget(lay, "\tx", "tab-separated columns"),
    "short-line": _short,
    "every-line-short": _all_short,
    "old-mac-line-ends": _mac,
    "empty-file": lambda lay: (b"", Refused(None, "no data lines")),
    "header-only": lambda lay: (
        (_join(lay, []), Refused(None, "no data lines")) if lay.header is not None else None
    ),
    "score-nan": lambda lay: _label(lay, "nan", "not a finite number") if lay.regression else None,
    "score-inf": lambda lay: _label(lay, "-inf", "not a finite number") if lay.regression else None,
    "score-overflow": lambda lay: (
        _label(lay, "1e999", "not a finite number") if lay.regression else None
    ),
    "score-word": lambda lay: _label(lay, "five", "is not a number") if lay.regression else None,
    "label-unknown": lambda lay: (
        _label(lay, "positive", "label 'positive'") if lay.glue and not lay.regression else None
    ),
    "label-empty": lambda lay: _label(lay, "", "score ''" if lay.task == "sts-b" else "label"),
    "label-nan": lambda lay: (
        _label(lay, "NaN", "not a finite number") if lay.task == "classification" else None
    ),
    # The generic layouts: a header, trailing tabs.
    "header-label": lambda lay: (
        _prepend(lay, "label" + "\ttext" * _tabs(lay), Refused(1, "looks like a header"))
        if lay.task == "classification"
        else None
    ),
    "header-rare-label": lambda lay: (
        _prepend(lay, "sentiment" + "\ttext" * _tabs(lay), Refused(1, "a header?"))
        if lay.task == "classification"
        else None
    ),
    "header-score": lambda lay: (
        _prepend(lay, "score\ttext_a\ttext_b", Refused(1, "a header?"))
        if lay.task == "regression"
        else None
    ),
    "trailing-tab-everywhere": lambda lay: (
        (
            _join(lay, [line + "\t" for line in lay.lines]),
            Refused(None, "empty on every line") if _tabs(lay) == 1 else Refused(1, "trailing tab"),
        )
        if not lay.glue
        else None
    ),
    "trailing-tab-once": lambda lay: None if lay.glue else _retarget(lay, "\t", "a trailing tab?"),
}


def _tsv_cases():
    for name, layout in TSV_LAYOUTS.items():
        for damage, make in TSV_DAMAGES.items():
            if make(layout) is not None:
                yield pytest.param(name, damage, id=f"{name}-{damage}")


def _examples(task_name: str, data_dir, split: str) -> list[tuple]:
    task = get_task(task_name)
    return [(e.text_a, e.text_b, e.label) for e in task.read(str(data_dir), split)]


def _strip(value, inside: str):
    """`value` (examples: tuples of strings, numbers, tuples) with `inside` removed from
    every string in it."""
    if isinstance(value, str):
        return value.replace(inside, "") if inside else value
    if isinstance(value, (list, tuple)):
        return type(value)(_strip(item, inside) for item in value)
    return value


def _check(outcome, read: Callable[[], list], expected: Callable[[], list], path, capsys):
    """The damaged file reads as `outcome` says (read() raising its one line, or returning
    what expected() returns of the undamaged file)."""
    if isinstance(outcome, Refused):
        with pytest.raises((DataError, MissingFileError)) as caught:
            read()
        message = str(caught.value)
        assert "\n" not in message
        assert str(path) + (f":{outcome.line}:" if outcome.line is not None else "") in message
        assert outcome.says in message
        if outcome.offset is not None:
            assert f"byte offset {outcome.offset} " in message
        return
    result = read()
    if isinstance(outcome, Dropped):
        base = expected()
        assert result == base[: outcome.row] + base[outcome.row + 1 :]
        assert outcome.note in capsys.readouterr().err
    else:
        assert _strip(result, outcome.inside) == expected()


@pytest.mark.parametrize("layout_name,damage", list(_tsv_cases()))
def test_a_damaged_tsv_file_reads_right_or_is_one_line(tmp_path, capsys, layout_name, damage):
    layout = TSV_LAYOUTS[layout_name]
    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder in (good, bad):
        folder.mkdir()
        (folder / "dev.tsv").write_bytes(_join(layout, list(layout.lines)))
    (good / "train.tsv").write_bytes(_join(layout, list(layout.lines)))
    data, outcome = TSV_DAMAGES[damage](layout)
    (bad / "train.tsv").write_bytes(data)
    _check(
        outcome,
        lambda: _examples(layout.task, bad, "train"),
        lambda: _examples(layout.task, good, "train"),
        bad / "train.tsv",
        capsys,
    )


@pytest.mark.parametrize(
    "dev,outcome",
    [
        ("label\ttext\npos\tx\n", Refused(1, "looks like a header")),
        ("pos\tx\nneg\n", Refused(2, "1 tab-separated columns, expected 2")),
        ("pos\tx\tz\n", Refused(1, "3 tab-separated columns, expected 2")),
        ("nan\tx\n", Refused(1, "not a finite number")),
        ("happy\tx\n", Refused(1, "does not occur in train.tsv")),
        ("\ufeffpos\tx\r\nneg\ty\u2028z\r\n", Same("\u2028")),
    ],
    ids=["header", "short", "pair-in-single", "nan", "unseen-label", "bom-crlf-u2028"],
)
def test_a_damaged_generic_dev_file(tmp_path, capsys, dev, outcome):
    (tmp_path / "train.tsv").write_text("pos\ta\nneg\tb\n")
    (tmp_path / "dev.tsv").write_text(dev)
    _check(
        outcome,
        lambda: _examples("classification", tmp_path, "dev"),
        lambda: [("x", None, "pos"), ("yz", None, "neg")],
        tmp_path / "dev.tsv",
        capsys,
    )


# ---------------------------------------------------------------- JSON layouts

RACE_ARTICLE = {
    "answers": ["B", "D"],
    "options": [["a cat", "a dog", "a fish", "a bird"], ["red", "blue", "green", "black"]],
    "questions": ["Tom has _ .", "What colour is the dog?"],
    "article": "Tom has a dog. It barks. The dog is black.",
    "id": "high1.txt",
}
SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": "Ann met Bob in Rome. They ate pasta.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "Who met Bob?",
                            "is_impossible": False,
                            "answers": [{"text": "Ann", "answer_start": 0}],
                        },
                        {
                            "id": "q2",
                            "question": "Where?",
                            "is_impossible": False,
                            "answers": [{"text": "Rome", "answer_start": 15}],
                        },
                        {"id": "q3", "question": "Why?", "is_impossible": True, "answers": []},
                    ],
                }
            ],
        }
    ],
}


def _pretty(value) -> bytes:
    return json.dumps(value, indent=1, ensure_ascii=False).encode()


def _edit(value, change: Callable) -> bytes:
    value = json.loads(json.dumps(value))
    change(value)
    return _pretty(value)


def _marked(value, marker: str, replacement: bytes, says: str) -> tuple[bytes, object]:
    """The JSON with the string "marker" (quotes included) replaced by raw bytes, refused
    at the line where they stand."""
    text = _pretty(value).replace(json.dumps(marker).encode(), replacement)
    offset = text.index(replacement)
    return text, Refused(text[:offset].count(b"\n") + 1, says)


def _race_set(value, key, item):
    value[key] = item


def _race_edit(key, item):
    return lambda v: _race_set(v, key, item)


def _with_marker(value, path: tuple, marker: str):
    value = json.loads(json.dumps(value))
    target = value
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = marker
    return value


def _json_damages(base, text_path: tuple, number_path: tuple) -> dict:
    """Damages every JSON layout shares; text_path leads to a text, number_path to a number."""
    text_value = base
    for key in text_path:
        text_value = text_value[key]

    def inside(char):
        value = json.loads(json.dumps(base))
        target = value
        for key in text_path[:-1]:
            target = target[key]
        target[text_path[-1]] = text_value + char
        return _pretty(value), Same(char)

    def latin1():
        value = _with_marker(base, text_path, "@MARK@")
        data = _pretty(value).replace(b"@MARK@", b"caf\xe9")
        return data, _refused_byte(data, b"\xe9")

    return {
        "bom": lambda: (b"\xef\xbb\xbf" + _pretty(base), Same()),
        "crlf": lambda: (_pretty(base).replace(b"\n", b"\r\n"), Same()),
        "bom-crlf-one-line": lambda: (
            b"\xef\xbb\xbf" + json.dumps(base).encode() + b"\r\n",
            Same(),
        ),
        **{f"inside-U+{ord(c):04X}": (lambda c=c: inside(c)) for c in ("\u2028", "\x85", "\x0c")},
        "latin1-byte": latin1,
        "utf16-file": lambda: (
            _pretty(base).decode().encode("utf-16"),
            Refused(1, "byte 0xff at byte offset 0 is not UTF-8", 0),
        ),
        "nan": lambda: _marked(
            _with_marker(base, number_path, "@N@"), "@N@", b"NaN", "NaN is not a JSON number"
        ),
        "minus-infinity": lambda: _marked(
            _with_marker(base, number_path, "@N@"),
            "@N@",
            b"-Infinity",
            "-Infinity is not a JSON number",
        ),
        "cut-short": lambda: (_pretty(base)[:-7], Refused(None, "not JSON")),
        "trailing-comma": lambda: (_pretty(base)[:-2] + b",\n}", Refused(None, "not JSON")),
        "empty-file": lambda: (b"", Refused(1, "not JSON")),
        "a-list": lambda: (_pretty([base]), Refused(None, "")),
    }


RACE_DAMAGES = {
    **_json_damages(RACE_ARTICLE, ("article",), ("id",)),
    "three-options": lambda: (
        _edit(RACE_ARTICLE, lambda v: v["options"][1].pop()),
        Refused(None, "question 2 needs a list of 4 option strings"),
    ),
    "options-a-string": lambda: (
        _edit(RACE_ARTICLE, lambda v: v["options"].__setitem__(0, "abcd")),
        Refused(None, "question 1 needs a list of 4 option strings"),
    ),
    "answer-in-a-list": lambda: (
        _edit(RACE_ARTICLE, _race_edit("answers", [["B"], "D"])),
        Refused(None, "answer 1 is ['B'], expected one of A B C D"),
    ),
    "answer-lower-case": lambda: (
        _edit(RACE_ARTICLE, _race_edit("answers", ["b", "D"])),
        Refused(None, "answer 1 is 'b'"),
    ),
    "answers-one-short": lambda: (
        _edit(RACE_ARTICLE, _race_edit("answers", ["B"])),
        Refused(None, "2 questions, 2 option lists and 1 answers"),
    ),
    "article-empty": lambda: (
        _edit(RACE_ARTICLE, _race_edit("article", " ")),
        Refused(None, "the article is empty"),
    ),
    "article-a-list": lambda: (
        _edit(RACE_ARTICLE, _race_edit("article", ["Tom has a dog."])),
        Refused(None, "the article is empty or not a string"),
    ),
    "no-article": lambda: (
        _edit(RACE_ARTICLE, lambda v: v.pop("article")),
        Refused(None, "no 'article' field"),
    ),
    "questions-a-string": lambda: (
        _edit(RACE_ARTICLE, _race_edit("questions", "Tom has _ .")),
        Refused(None, "must be lists"),
    ),
    "no-answers-in-one-file": lambda: (
        _edit(RACE_ARTICLE, lambda v: v.pop("answers")),
        Refused(None, "2 of 4 questions have no answer"),
    ),
}


def _race_examples(root) -> list[tuple]:
    return [
        (e.index, e.article, e.question, e.options, e.label, e.level)
        for e in get_task("race").read(str(root), "dev")
    ]


@pytest.mark.parametrize("damage", sorted(RACE_DAMAGES))
def test_a_damaged_race_file_reads_right_or_is_one_line(tmp_path, capsys, damage):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for root in (good, bad):
        for level in ("middle", "high"):
            (root / "dev" / level).mkdir(parents=True)
            (root / "dev" / level / "1.txt").write_bytes(_pretty(RACE_ARTICLE))
    data, outcome = RACE_DAMAGES[damage]()
    (bad / "dev" / "high" / "1.txt").write_bytes(data)
    path = bad / "dev" / ("high/1.txt" if "in-one-file" not in damage else "")
    _check(outcome, lambda: _race_examples(bad), lambda: _race_examples(good), path, capsys)


def _squad_edit(change: Callable) -> bytes:
    return _edit(SQUAD, change)


def _qa(value, index: int) -> dict:
    return value["data"][0]["paragraphs"][0]["qas"][index]


QAS = ("data", 0, "paragraphs", 0, "qas")
SQUAD_DAMAGES = {
    **_json_damages(
        SQUAD, ("data", 0, "paragraphs", 0, "context"), (*QAS, 0, "answers", 0, "answer_start")
    ),
    "duplicate-id": lambda: (
        _squad_edit(lambda v: _qa(v, 1).__setitem__("id", "q1")),
        Refused(None, "question q1: duplicate id"),
    ),
    "id-a-bool": lambda: (
        _squad_edit(lambda v: _qa(v, 1).__setitem__("id", False)),
        Refused(None, 'qas[1]: question has no "id"'),
    ),
    "id-missing": lambda: (
        _squad_edit(lambda v: _qa(v, 2).pop("id")),
        Refused(None, 'qas[2]: question has no "id"'),
    ),
    "start-off-by-one": lambda: (
        _squad_edit(lambda v: _qa(v, 1)["answers"][0].__setitem__("answer_start", 14)),
        Refused(None, "question q2: answer_start 14 does not point at its text 'Rome'"),
    ),
    "start-a-float": lambda: (
        _squad_edit(lambda v: _qa(v, 1)["answers"][0].__setitem__("answer_start", 15.0)),
        Refused(None, "question q2: answer_start 15.0 does not point"),
    ),
    "answerable-without-answers": lambda: (
        _squad_edit(lambda v: _qa(v, 0).__setitem__("answers", [])),
        Refused(None, "question q1: answerable but has no answers"),
    ),
    "no-data-list": lambda: (_squad_edit(lambda v: v.pop("data")), Refused(None, '"data"')),
    "no-questions": lambda: (
        _squad_edit(lambda v: v["data"][0]["paragraphs"][0].__setitem__("qas", [])),
        Refused(None, "no usable questions"),
    ),
}


def _squad_examples(path) -> list[tuple]:
    questions, _ = reading.read_squad(str(path))
    return [(q.qid, q.question, q.context, q.answer_start, q.answers) for q in questions]


@pytest.mark.parametrize("damage", sorted(SQUAD_DAMAGES))
def test_a_damaged_squad_file_reads_right_or_is_one_line(tmp_path, capsys, damage):
    (tmp_path / "good.json").write_bytes(_pretty(SQUAD))
    data, outcome = SQUAD_DAMAGES[damage]()
    (tmp_path / "dev.json").write_bytes(data)
    _check(
        outcome,
        lambda: _squad_examples(tmp_path / "dev.json"),
        lambda: _squad_examples(tmp_path / "good.json"),
        tmp_path / "dev.json",
        capsys,
    )


def test_numeric_squad_ids_read_as_their_strings(tmp_path):
    data = _squad_edit(lambda v: [_qa(v, i).__setitem__("id", 100 + i) for i in range(3)])
    (tmp_path / "dev.json").write_bytes(data)
    assert [q[0] for q in _squad_examples(tmp_path / "dev.json")] == ["100", "101", "102"]


# ---------------------------------------------------------------- generated files

# Text characters: ASCII, the line-like characters of INSIDE, accents, CJK, an emoji, spaces.
ALPHABET = [*"abc xyz,.;'", *INSIDE, "é", "ß", "한", "字", "😀", "\u00a0", "\u3000"]


def _random_text(rng: random.Random) -> str:
    text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
    return text.rstrip("\r")  # "\r" before the line end is part of "\r\n"


def _generated(rng: random.Random, pairs: bool, task: str) -> tuple[bytes, list[tuple]]:
    """A generic or SST-2 train file of random texts, labels and line ends; its examples."""
    labels = ("0", "1") if task == "sst-2" else ("pos", "neg", "x y")
    rows, lines = [], ["sentence\tlabel"] if task == "sst-2" else []
    for i in range(rng.randint(3, 10)):
        label = labels[i % len(labels)] if i < 2 * len(labels) else rng.choice(labels)
        a = _random_text(rng) + "w"  # a line that is not blank
        b = _random_text(rng) if pairs else None
        rows.append((a, b, label))
        lines.append(
            f"{a}\t{label}" if task == "sst-2" else "\t".join([label, a] + ([b] if pairs else []))
        )
    end = rng.choice(["\n", "\r\n"])
    data = end.join(lines) + rng.choice([end, ""])
    return (b"\xef\xbb\xbf" if rng.random() < 0.5 else b"") + data.encode(), rows


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> TextEncoder:
    """A 30-piece SentencePiece model of plain words: the other characters are unknown."""
    rng = random.Random(0)
    words = "the a film cat dog was good bad very not".split()
    sentences = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)]
    path = str(tmp_path_factory.mktemp("spm") / "spiece.model")
    tokenizer.train_tokenizer(sentences, path, 30)
    return TextEncoder(path)


@pytest.mark.parametrize("seed", range(24))
def test_generated_files_read_back_exactly_and_bad_bytes_are_named(tmp_path, encoder, seed):
    rng = random.Random(seed)
    task = ("classification", "classification", "sst-2")[seed % 3]
    pairs = task == "classification" and seed % 2 == 0
    data, rows = _generated(rng, pairs, task)
    (tmp_path / "train.tsv").write_bytes(data)
    (tmp_path / "dev.tsv").write_bytes(data)
    examples = get_task(task).read(str(tmp_path), "train")
    assert [(e.text_a, e.text_b, e.label) for e in examples] == rows
    config = ml_collections.ConfigDict({"seq_len": 16, "num_segments": 1})
    features = get_task(task).featurize(examples, encoder, config, sorted({r[2] for r in rows}))
    assert features.arrays["input_ids"].shape == (len(rows), 1, 16)
    assert (features.arrays["input_ids"][:, 0, -1] == tokenizer.CLS_ID).all()
    # a byte that is not UTF-8, at a character boundary after the BOM: named by line and offset
    text = data.decode("utf-8-sig")
    start = len(data) - len(text.encode())
    cut = rng.randint(0, len(text))
    bad = rng.choice([b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80"])  # \xed\xa0\x80: a surrogate
    damaged = data[:start] + text[:cut].encode() + bad + text[cut:].encode()
    (tmp_path / "train.tsv").write_bytes(damaged)
    offset = start + len(text[:cut].encode())
    line = text[:cut].count("\n") + 1
    with pytest.raises(DataError) as caught:
        get_task(task).read(str(tmp_path), "train")
    message = str(caught.value)
    assert message.startswith(
        f"{tmp_path / 'train.tsv'}:{line}: byte 0x{bad[0]:02x} at byte offset {offset} is not UTF-8"
    )
    assert "\n" not in message


def test_every_damage_is_tried_on_some_layout():
    """A damage that no layout takes would test nothing."""
    for damage, make in TSV_DAMAGES.items():
        assert any(make(layout) is not None for layout in TSV_LAYOUTS.values()), damage
