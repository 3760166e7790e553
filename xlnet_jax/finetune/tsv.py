"""How every fine-tuning reader reads a file: the reading rule, TSV rows and JSON.

The reading rule (GLUE, the generic tasks, RACE and SQuAD alike):
- the file is UTF-8; a byte-order mark at its start is removed; a byte that is not UTF-8 is
  one line naming the file, its line and its byte offset;
- a TSV line ends at "\\n" (or "\\r\\n") and nothing else: U+0085, U+2028, form feed and a
  lone "\\r" are text (str.splitlines would end a line at each);
- a TSV line is split on tabs and nothing else (no quoting: a quote inside a sentence is
  text), as the original reads GLUE (csv with tabs and no quote character);
- a JSON file is standard JSON: NaN and Infinity, which Python's json reads, are refused
  with their line.
"""

import dataclasses
import json
import re
import sys

from xlnet_jax import paths
from xlnet_jax.errors import DataError, MissingFileError

_BOM = b"\xef\xbb\xbf"
# A JSON string, or a constant outside one that standard JSON lacks (group 1).
_NON_STANDARD = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')


@dataclasses.dataclass(frozen=True)
class Row:
    """One data line: its fields and where it came from (for messages)."""

    fields: list[str]
    path: str
    line: int  # 1-based line number in the file

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def note(message: str) -> None:
    """A reader's one-line report of what it guessed, skipped or counted (on stderr)."""
    print(message, file=sys.stderr, flush=True)


def read_text(path: str, what: str) -> str:
    """The file's text under the reading rule (BOM removed; non-UTF-8 bytes refused).

    Raises:
      MissingFileError: the file is not there (`what` says what it should hold).
      DataError: a byte that is not UTF-8, naming the line and the byte offset.
    """
    file = paths.as_path(path)
    if not file.is_file():
        raise MissingFileError(f"{path}: not found (expected {what}).")
    data = file.read_bytes()
    skipped = len(_BOM) if data.startswith(_BOM) else 0
    try:
        return data[skipped:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = skipped + e.start
        line = data[:offset].count(b"\n") + 1
        raise DataError(
            f"{path}:{line}: byte 0x{data[offset]:02x} at byte offset {offset} is not UTF-8; "
            "the file must be UTF-8 (convert it, e.g. iconv -f latin1 -t utf-8)"
        ) from None


def read_lines(path: str, what: str) -> list[tuple[int, str]]:
    """(1-based line number, text) of every line that is not blank, under the reading rule."""
    lines = read_text(path, what).split("\n")
    return [
        (number, text[:-1] if text.endswith("\r") else text)
        for number, text in enumerate(lines, start=1)
        if text.strip()
    ]


def read_json(path: str, what: str):
    """The file's JSON value under the reading rule; a DataError naming the line otherwise."""
    text = read_text(path, what)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not JSON ({e.msg} at column {e.colno}; "
                        f"expected {what})") from None  # fmt: skip
    except _NonStandard:
        found = next(m for m in _NON_STANDARD.finditer(text) if m.group(1))
        line = text.count("\n", 0, found.start()) + 1
        raise DataError(
            f"{path}:{line}: {found.group(1)} is not a JSON number (write a finite number, "
            "or leave the field out)"
        ) from None


class _NonStandard(Exception):
    """json.loads met NaN or Infinity (found again with its line by read_json)."""


def _refuse_constant(name: str):
    raise _NonStandard(name)


def read_rows(
    path: str, *, header: bool, columns: int | None, what: str, skip_short: bool = False
) -> tuple[list[str], list[Row]]:
    """The header fields (empty without one) and the data rows of a TSV file.

    Args:
      path: the file (local or gs://).
      header: whether line 1 names the columns.
      columns: the column count every line must have; None: the header's count (without a
        header, the first line's).
      what: what the file should hold, for messages (e.g. "the MNLI data").
      skip_short: skip a line with fewer columns, printing how many were skipped and the
        first (the original's GLUE processors skip such lines with a warning); refused when
        every line is short. Otherwise a short line is refused.

    Raises:
      MissingFileError: the file is not there.
      DataError: non-UTF-8 bytes, a line with another column count, or no data line at all.
    """
    lines = read_lines(path, what)
    names = lines[0][1].split("\t") if header and lines else []
    data = lines[1:] if header else lines
    if columns is not None:
        expected = columns
    elif header:
        expected = len(names)
    else:
        expected = len(data[0][1].split("\t")) if data else 0
    source = f"for {what}" if columns is not None else "as the header" if header else "as line 1"
    rows, short = [], []
    for number, text in data:
        fields = text.split("\t")
        if len(fields) < expected and skip_short:
            short.append((number, len(fields)))
            continue
        if len(fields) != expected:
            raise DataError(
                f"{path}:{number}: {len(fields)} tab-separated columns, expected {expected} "
                f"({source}); is this {what}?"
            )
        rows.append(Row(fields, str(path), number))
    if short and not rows:
        number, count = short[0]
        raise DataError(
            f"{path}:{number}: {count} tab-separated columns, expected {expected} ({source}), "
            f"and so every line; is this {what}?"
        )
    if short:
        number, count = short[0]
        note(
            f"{path}: skipped {len(short)} line(s) with fewer than {expected} tab-separated "
            f"columns, as the original's processors do; first: line {number} ({count} columns)"
        )
    if not rows:
        raise DataError(f"{path}: no data lines (expected {what}).")
    return names, rows
