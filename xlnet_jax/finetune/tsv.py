"""Tab-separated files as GLUE distributes them: one line a row, no quoting, errors by line.

GLUE's files are read as the original reads them (csv with tabs and no quote character):
a line is split on tabs and nothing else, so a quote inside a sentence is text.
"""

import dataclasses

from xlnet_jax import paths
from xlnet_jax.errors import DataError, MissingFileError


@dataclasses.dataclass(frozen=True)
class Row:
    """One data line: its fields and where it came from (for messages)."""

    fields: list[str]
    path: str
    line: int  # 1-based line number in the file

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def read_rows(
    path: str, *, header: bool, columns: int | None, what: str
) -> tuple[list[str], list[Row]]:
    """The header fields (empty without one) and the data rows of a TSV file.

    Args:
      path: the file (local or gs://).
      header: whether line 1 names the columns.
      columns: the column count every line must have; None: the header's count (without a
        header, the first line's).
      what: what the file should hold, for messages (e.g. "the MNLI data").

    Raises:
      MissingFileError: the file is not there.
      DataError: a line with another column count, or no data line at all.
    """
    file = paths.as_path(path)
    if not file.is_file():
        raise MissingFileError(f"{path}: not found (expected {what}).")
    lines = file.read_text(encoding="utf-8").splitlines()
    names = lines[0].split("\t") if header and lines else []
    if columns is not None:
        expected = columns
    elif header:
        expected = len(names)
    else:
        expected = len(next((line for line in lines if line.strip()), "").split("\t"))
    rows = []
    for number, text in enumerate(lines[1:] if header else lines, start=2 if header else 1):
        if not text.strip():
            continue
        fields = text.split("\t")
        if len(fields) != expected:
            source = (
                f"for {what}"
                if columns is not None
                else "as line 1"
                if not header
                else "as the header"
            )
            raise DataError(
                f"{path}:{number}: {len(fields)} tab-separated columns, expected {expected} "
                f"({source}); is this {what}?"
            )
        rows.append(Row(fields, str(path), number))
    if not rows:
        raise DataError(f"{path}: no data lines (expected {what}).")
    return names, rows
