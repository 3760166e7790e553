"""Your own labels: `classification` and `regression` from plain tab-separated files.

--data_dir holds train.tsv and dev.tsv (test.tsv optional), no header, one example a line:
LABEL<TAB>TEXT or LABEL<TAB>TEXT_A<TAB>TEXT_B (every line of a run the same). test.tsv
lines have the same texts without the label. The classes are the labels of train.tsv,
sorted; a label of dev.tsv that train.tsv lacks is an error. Texts longer than seq_len are
read through the recurrence memory (config.num_segments).

Nothing is guessed silently. Files are read by the reading rule (finetune/tsv.py). Reading
train.tsv prints its shape (single texts or pairs) and its labels with their counts (its
score range for regression). Refused, in one line naming the file and line: a first line
that looks like a header (the label `label`, a score that is not a number, or a label found
only there while every other label occurs _MANY or more times; test.tsv: column names), a
line of another shape than the first, a third column empty on every line (trailing tabs),
an empty label, and a label or score that is a non-finite number (nan, inf). Empty texts
are counted and the count printed. With two classes, the metrics are accuracy and the F1 of
the second class in sorted order (the positive one of 0/1, neg/pos, false/true).
"""

import collections
import math
from collections.abc import Sequence

from xlnet_jax import paths
from xlnet_jax.errors import DataError
from xlnet_jax.finetune import metrics, tsv
from xlnet_jax.finetune.tasks.pair import PairExample, PairTask, finite_score

_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_SHAPES = {2: "single texts (LABEL<TAB>TEXT)", 3: "pairs (LABEL<TAB>TEXT_A<TAB>TEXT_B)"}
_LAYOUT = "LABEL<TAB>TEXT or LABEL<TAB>TEXT_A<TAB>TEXT_B lines, no header"
# A header's label, and a test.tsv header's column names (lower case).
_HEADER_LABEL = "label"
_TEST_HEADER_NAMES = frozenset({"text", "text_a", "text_b", "sentence", "sentence1", "sentence2"})
# A label found only on line 1 while every other occurs this often reads as a header.
_MANY = 5
_NO_HEADER = "these files have no header: remove it"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class GenericTask(PairTask):
    """Your own labelled pairs; `head` picks classification or regression."""

    test_splits = ("test",)

    def __init__(self):
        # data_dir -> (train.tsv's column count, its examples): read and reported once.
        self._train: dict[str, tuple[int, list[PairExample]]] = {}
        self._classes: list[str] = []  # the sorted labels of the train.tsv read last

    def has_split(self, data_dir: str, split: str) -> bool:
        return (paths.as_path(data_dir) / _FILES[split]).is_file()

    def labels(self, data_dir: str) -> list[str]:
        if self.regression:
            return ["score"]
        self._read_train(data_dir)
        return list(self._classes)

    def read(self, data_dir: str, split: str) -> list[PairExample]:
        """The split's examples (train.tsv is read first: it fixes the shape and the labels)."""
        columns, train = self._read_train(data_dir)
        if split == "train":
            return train
        path = str(paths.as_path(data_dir) / _FILES[split])
        if split == "test":
            what = "the texts of train.tsv's lines, without labels"
            rows = _rows(path, what, columns - 1, f"as train.tsv's texts, {_SHAPES[columns]}")
            first = rows[0].fields
            if all(field.strip().lower() in _TEST_HEADER_NAMES for field in first):
                raise DataError(f"{rows[0].where}: {first!r} looks like a header; {_NO_HEADER}")
        else:
            rows = _rows(path, _LAYOUT, columns, f"as train.tsv's lines, {_SHAPES[columns]}")
        known = None if self.regression or split == "test" else set(self._classes)
        examples = self._examples(rows, split != "test", known)
        _report_empty(rows, examples)
        return examples

    def _read_train(self, data_dir: str) -> tuple[int, list[PairExample]]:
        """train.tsv's column count and examples, checked and reported on the first call."""
        if data_dir in self._train:
            return self._train[data_dir]
        path = str(paths.as_path(data_dir) / _FILES["train"])
        rows = _rows(path, _LAYOUT, None, "as line 1")
        columns = len(rows[0].fields)
        if all(not row.fields[-1].strip() for row in rows) and columns == 3:
            raise DataError(
                f"{path}: the third column is empty on every line (trailing tabs?); remove "
                "them for single texts, or give each line its TEXT_B"
            )
        examples = self._examples(rows, True, None)
        if not self.regression:
            counts = collections.Counter(e.label for e in examples)
            _refuse_header_label(rows[0], examples[0].label, counts)
            self._classes = sorted(counts)
            found = ", ".join(f"{label} {counts[label]}" for label in self._classes)
            labels = f"{len(counts)} labels: {found}"
        else:
            scores = [e.label for e in examples]
            labels = f"scores from {min(scores):g} to {max(scores):g}"
        tsv.note(f"{path}: {len(examples)} examples of {_SHAPES[columns]}; {labels}")
        _report_empty(rows, examples)
        self._train[data_dir] = columns, examples
        return columns, examples

    def _examples(
        self, rows: list[tsv.Row], labelled: bool, known: set[str] | None
    ) -> list[PairExample]:
        """Rows as examples, the labels checked."""
        examples = []
        for position, row in enumerate(rows):
            texts = row.fields[1:] if labelled else row.fields
            label = self._label(row, position == 0, known) if labelled else None
            text_b = texts[1] if len(texts) == 2 else None
            examples.append(PairExample(str(position), texts[0], text_b, label, row.where))
        return examples

    def _label(self, row: tsv.Row, first: bool, known: set[str] | None) -> str | float:
        """A row's label: a finite score, or a class name (one of `known` when given)."""
        text = row.fields[0].strip()
        if not text:
            raise DataError(f"{row.where}: empty label (the line starts with a tab)")
        if self.regression:
            if first and not _is_number(text):
                raise DataError(
                    f"{row.where}: score {text!r} is not a number; a header? {_NO_HEADER}"
                )
            return finite_score(text, row.where)
        if _is_number(text) and not math.isfinite(float(text)):
            raise DataError(
                f"{row.where}: label {text!r} is not a finite number (a missing value?); give "
                "the line its label or leave it out"
            )
        if first and text.lower() == _HEADER_LABEL:
            raise DataError(f"{row.where}: label {text!r} looks like a header; {_NO_HEADER}")
        if known is not None and text not in known:
            raise DataError(
                f"{row.where}: label {text!r} does not occur in train.tsv "
                f"(its labels: {sorted(known)})"
            )
        return text

    def metrics(self, examples: Sequence[PairExample], predictions: list[dict]) -> dict[str, float]:
        """PairTask's metrics; with two classes, F1 of the second (sorted) beside accuracy."""
        if self.regression or len(self._classes) != 2:
            return super().metrics(examples, predictions)
        gold = [e.label for e in examples]
        predicted = [p["prediction"] for p in predictions]
        return metrics.classification_metrics(
            "f1_accuracy", gold, predicted, positive=self._classes[1]
        )


def _rows(path: str, what: str, columns: int | None, expected: str) -> list[tsv.Row]:
    """The file's rows, each with `columns` tab-separated fields (None: line 1's count, which
    must be 2 or 3); a DataError naming the first line of another shape."""
    lines = tsv.read_lines(path, what)
    if not lines:
        raise DataError(f"{path}: no data lines (expected {what}).")
    if columns is None:
        number, text = lines[0]
        columns = text.count("\t") + 1
        if columns not in _SHAPES:
            raise DataError(
                f"{path}:{number}: {columns} tab-separated columns{_trailing(text)}, expected "
                f"{_LAYOUT}"
            )
        expected += ", which ends in a tab" if text.endswith("\t") else ""
    rows = []
    for number, text in lines:
        fields = text.split("\t")
        if len(fields) != columns:
            raise DataError(
                f"{path}:{number}: {len(fields)} tab-separated columns{_trailing(text)}, "
                f"expected {columns} ({expected}); every line must have the same shape"
            )
        rows.append(tsv.Row(fields, path, number))
    return rows


def _report_empty(rows: list[tsv.Row], examples: list[PairExample]) -> None:
    """Prints how many texts are empty (or blank) and the first line holding one."""
    empty = [
        row.line
        for row, example in zip(rows, examples, strict=True)
        for text in (example.text_a, example.text_b)
        if text is not None and not text.strip()
    ]
    if empty:
        tsv.note(
            f"{rows[0].path}: {len(empty)} empty text(s) in {len(rows)} lines, read as empty "
            f"(first: line {empty[0]})"
        )


def _trailing(text: str) -> str:
    return " (a trailing tab?)" if text.endswith("\t") else ""


def _refuse_header_label(row: tsv.Row, label: str, counts: collections.Counter) -> None:
    """A DataError when line 1's label is found nowhere else while every other label is
    common: the line is a header (the `label` text itself is refused by _label)."""
    others = [count for name, count in counts.items() if name != label]
    if counts[label] == 1 and others and min(others) >= _MANY:
        raise DataError(
            f"{row.where}: label {label!r} occurs only on this first line, every other label "
            f"{min(others)} or more times: a header? {_NO_HEADER} (or, if it is an example, "
            "move it off the first line)"
        )


class Classification(GenericTask):
    name, head = "classification", "classification"


class Regression(GenericTask):
    name, head = "regression", "regression"
