"""Reading the inputs, the first pass of both prepare engines (prepare.py, beam_prepare.py).

Each input's documents are normalised and keyed (document_keys) where they are read; its
manifest record gets its document and sentence counts. check_inputs then looks at all the
records: inputs without text are warned about, a corpus of them is refused, and a corpus
whose accents the default normalisation dropped in bulk is told about --keep_accents.
"""

import logging
import sys
from collections.abc import Iterator

from xlnet_jax.data import document_keys, sources
from xlnet_jax.data.normalize import normalize_document
from xlnet_jax.errors import DataError

# prepare says so when the default normalisation drops more than this share of the corpus's
# non-ASCII letters, and they are more than _LOSS_FLOOR of its characters (an English text
# with a few accented names stays quiet).
_LOSS_HINT = 0.01
_LOSS_FLOOR = 0.001
NO_TEXT = "Every input is empty; pass files that hold text."


def normalized_documents(
    source: sources.Input, position: int, norm: dict, letters: list[int]
) -> Iterator[tuple[int, list[str]]]:
    """(key, normalised lines) of each document of the input at `position` that keeps any
    text; fills its record's documents and sentences, adds to letters (see
    normalize_document)."""
    docs = sentences = 0
    for index, raw in enumerate(source.documents()):
        lines, counts = normalize_document(raw, **norm)
        letters[:] = [a + b for a, b in zip(letters, counts, strict=True)]
        if lines:
            docs += 1
            sentences += len(lines)
            yield document_keys.document_key(position, index), lines
    source.record.update(documents=docs, sentences=sentences)


def check_inputs(inputs: list[sources.Input], letters: list[int]) -> None:
    """After reading: warns of inputs without text, refuses a corpus of them, and says so
    in one line when the default normalisation dropped more than _LOSS_HINT of the
    corpus's non-ASCII letters (accents: é -> e, が -> か)."""
    for source in inputs:
        if not source.record["documents"]:
            # A glob over a real directory meets empty and blank files: skip them, but keep
            # the record (the corpus is the same without them).
            blank = bool(source.record["bytes"])
            what = "holds only blank lines" if blank else "is empty"
            logging.warning("Input %s %s; skipped.", source.record["path"], what)
            source.record["skipped"] = "no text" if blank else "empty"
    if not any(source.record["documents"] for source in inputs):
        raise DataError(NO_TEXT)
    chars, letters_, lost = letters
    if lost > _LOSS_HINT * letters_ and lost > _LOSS_FLOOR * chars:
        print(
            f"The default normalisation dropped the accents of {lost / letters_:.1%} of this "
            f"corpus's non-ASCII letters ({lost:,} of {letters_:,}, e.g. é -> e); prepare with "
            "--keep_accents to keep them.",
            file=sys.stderr,
        )
