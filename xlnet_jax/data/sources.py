"""Corpus inputs: text files and globs (local or gs://), a local tfds text dataset, or the
built-in corpus.

Every input yields documents as lists of raw sentences (normalisation comes later) and
fills `record`, its manifest entry: name, bytes, sha256 of the content read, and the
lines skipped or cleaned.

Text files: one sentence per line; a blank (or whitespace-only) line ends a document. An
empty or blank file is skipped with a warning (prepare records it). Damage is counted per file,
logged with the byte offset of its first line, and kept in the manifest:
  - invalid UTF-8: a line that does not decode is skipped. A file where more than 10% of
    the lines do not decode is refused as not UTF-8 (convert it with iconv first);
  - control characters (NUL, ESC, DEL...): the line is kept, normalize turns them into
    spaces;
  - a line longer than MAX_LINE_BYTES (64 KiB; no sentence is that long, a base64 blob or
    a minified file is) is skipped, read past in pieces without holding it whole.
"""

import glob
import hashlib
import io
import logging
import os
from collections.abc import Iterator

import fsspec

from xlnet_jax import paths
from xlnet_jax.data import builtin_corpus
from xlnet_jax.data.normalize import CONTROL_CHARS
from xlnet_jax.errors import DataError, one_line

MAX_INVALID_FRACTION = 0.1
MAX_LINE_BYTES = 65_536


class Input:
    """One corpus input: its manifest record and a fresh pass over its documents."""

    def __init__(self, name: str):
        self.record = {
            "path": name,
            "bytes": 0,
            "sha256": "",
            "invalid_utf8_lines": 0,
            "control_char_lines": 0,
            "long_lines": 0,
        }

    def documents(self) -> Iterator[list[str]]:
        raise NotImplementedError


def resolve_inputs(
    inputs: list[str],
    tfds_name: str | None = None,
    tfds_text_feature: str = "text",
    tfds_split: str = "train",
    tfds_data_dir: str | None = None,
) -> list[Input]:
    """Checks every input up front; no inputs at all means the built-in corpus."""
    resolved: list[Input] = [TextFile(path) for path in expand_paths(inputs)]
    if tfds_name:
        resolved.append(TfdsText(tfds_name, tfds_text_feature, tfds_split, tfds_data_dir))
    return resolved or [Builtin()]


def expand_paths(inputs: list[str]) -> list[str]:
    """Files named or matched by globs, local or gs:// (sorted per glob, duplicates
    dropped)."""
    found: list[str] = []
    for item in inputs:
        if paths.is_remote(item):
            matches = _remote_matches(item)
        elif glob.has_magic(item):
            matches = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not matches:
                raise DataError(f"No file matches {item!r}; check the pattern and quote it.")
        elif os.path.isdir(item):
            pattern = os.path.join(item.rstrip("/") or "/", "*.txt")
            raise DataError(f"{item} is a directory; pass its files or a glob like '{pattern}'.")
        elif not os.path.exists(item):
            raise DataError(f"Input {item} does not exist; check the path.")
        else:
            matches = [item]
        found += [p for p in matches if p not in found]
    return found


def _remote_matches(item: str) -> list[str]:
    """The objects an object-storage path or glob names (gs://B/text/*.txt)."""
    fs, path = fsspec.core.url_to_fs(item)
    protocol = item.split("://", 1)[0]

    def listing() -> list[str]:
        fs.invalidate_cache()
        if glob.has_magic(path):
            return sorted(p for p in fs.glob(path) if fs.isfile(p))
        return [path] if fs.isfile(path) else []

    matches = [f"{protocol}://{p}" for p in paths.retry(listing, f"listing {item}")]
    if not matches:
        raise DataError(f"No object matches {item!r}; check the path (and quote a glob).")
    return matches


class _Damage:
    """Lines of one kind of damage in a file: how many, and the byte offset of the first."""

    def __init__(self):
        self.count, self.first = 0, None

    def add(self, offset: int) -> None:
        self.count += 1
        self.first = offset if self.first is None else self.first


def _lines(f, sha) -> Iterator[tuple[bytes | None, int]]:
    """(line, its size in bytes) of a binary file, every byte into sha; the line is None
    when longer than MAX_LINE_BYTES, whose rest is read in pieces and dropped."""
    while raw := f.readline(MAX_LINE_BYTES + 1):
        sha.update(raw)
        if len(raw) <= MAX_LINE_BYTES:
            yield raw, len(raw)
            continue
        size = len(raw)
        while not raw.endswith(b"\n") and (raw := f.readline(MAX_LINE_BYTES)):
            sha.update(raw)
            size += len(raw)
        yield None, size


def _open(path: str):
    """A local file or an object (gs://, read through gcsfs and its retries), binary."""
    if not paths.is_remote(path):
        return open(path, "rb")
    return io.BufferedReader(paths.as_path(path).open("rb"), 2**20)  # readline(limit)


class TextFile(Input):
    """A UTF-8 text file: one sentence per line, blank lines between documents."""

    def __init__(self, path: str):
        super().__init__(path)
        self.path = path

    def documents(self) -> Iterator[list[str]]:
        sha, offset, lines = hashlib.sha256(), 0, 0
        bad, control, long = _Damage(), _Damage(), _Damage()
        doc: list[str] = []
        with _open(self.path) as f:
            for raw, size in _lines(f, sha):
                line = None
                if raw is None:
                    long.add(offset)
                else:
                    try:
                        line = raw.decode("utf-8").strip()
                    except UnicodeDecodeError:
                        bad.add(offset)
                if line and CONTROL_CHARS.search(line):
                    control.add(offset)
                offset += size
                lines += 1
                if line:
                    doc.append(line)
                elif line == "" and doc:
                    yield doc
                    doc = []
        if doc:
            yield doc
        self.record.update(bytes=offset, sha256=sha.hexdigest())
        if bad.count > MAX_INVALID_FRACTION * lines:
            raise DataError(
                f"{self.path}: {bad.count} of {lines} lines are not valid UTF-8 (first at byte "
                f"{bad.first}); it does not look like UTF-8 text. Convert it, e.g. "
                f"`iconv -f latin1 -t utf-8`, or remove it from the inputs."
            )
        self._report(
            bad,
            "invalid_utf8_lines",
            "first_invalid_utf8_offset",
            "skipped %d line(s) that are not valid UTF-8",
        )
        self._report(
            control,
            "control_char_lines",
            "first_control_char_offset",
            "%d line(s) hold control characters (NUL, ESC...), turned into spaces",
        )
        self._report(
            long,
            "long_lines",
            "first_long_line_offset",
            f"skipped %d line(s) longer than {MAX_LINE_BYTES:,} bytes",
        )

    def _report(self, damage: _Damage, count_key: str, offset_key: str, what: str) -> None:
        """Records one kind of damage in the manifest entry and warns once if there is any."""
        self.record[count_key] = damage.count
        if damage.count:
            self.record[offset_key] = damage.first
            what = what % damage.count
            logging.warning("%s: %s, the first at byte %d.", self.path, what, damage.first)


class TfdsText(Input):
    """A text feature of a tfds dataset already prepared (array_record) in a local data dir.

    Each example is a document; its lines are the sentences. Nothing is downloaded.
    """

    def __init__(self, name: str, feature: str, split: str, data_dir: str | None):
        super().__init__(f"tfds:{name}/{split}[{feature}]")
        self.feature = feature
        self._where = (name, feature, split, data_dir)
        self.source = _open_tfds(*self._where)

    def __getstate__(self) -> dict:
        """Pickled (for a Beam worker) without its open data source; reopened there."""
        return {**self.__dict__, "source": None}

    def documents(self) -> Iterator[list[str]]:
        if self.source is None:
            self.source = _open_tfds(*self._where)
        sha, size, bad, control = hashlib.sha256(), 0, 0, 0
        for start in range(0, len(self.source), 256):
            keys = list(range(start, min(start + 256, len(self.source))))
            for example in self.source.__getitems__(keys):
                text = example[self.feature]
                if isinstance(text, bytes):
                    sha.update(text)
                    size += len(text)
                    try:
                        text = text.decode("utf-8")
                    except UnicodeDecodeError:
                        bad += 1
                        continue
                else:
                    data = text.encode("utf-8")
                    sha.update(data)
                    size += len(data)
                sentences = [s.strip() for s in text.splitlines() if s.strip()]
                control += sum(1 for s in sentences if CONTROL_CHARS.search(s))
                if sentences:
                    yield sentences
        self.record.update(
            bytes=size, sha256=sha.hexdigest(), invalid_utf8_lines=bad, control_char_lines=control
        )
        if bad:
            logging.warning(
                "%s: skipped %d example(s) that are not valid UTF-8.", self.record["path"], bad
            )
        if control:
            logging.warning(
                "%s: %d line(s) hold control characters (NUL, ESC...), turned into spaces.",
                self.record["path"],
                control,
            )


def _open_tfds(name: str, feature: str, split: str, data_dir: str | None):
    """The dataset's random-access source, or a DataError that says how to get it locally."""
    import tensorflow_datasets as tfds

    where = data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        prepared = builder.is_prepared()
    except Exception as e:  # tfds raises many types for an unknown or unreadable dataset
        raise DataError(
            f"tfds dataset {name!r} is not available in {where} ({one_line(e, 300)}). "
            "Prepare it there first (array_record format), set "
            "TFDS_DATA_DIR, or pass text files instead."
        ) from None
    if not prepared:
        raise DataError(
            f"tfds dataset {name!r} is known but not prepared in {where}; nothing is downloaded "
            "here. Run its download_and_prepare(file_format='array_record') on a machine with "
            "network access and copy the data dir, or pass text files instead."
        )
    features = builder.info.features
    if feature not in features:
        raise DataError(
            f"tfds dataset {name!r} has no feature {feature!r}; its features are "
            f"{sorted(features.keys())}. Pass the text one as tfds_text_feature."
        )
    try:
        return builder.as_data_source(split=split)
    except Exception as e:  # wrong split, or a tfrecord-only dataset (needs tensorflow)
        raise DataError(
            f"tfds dataset {name!r} split {split!r} cannot be read without tensorflow "
            f"({one_line(e, 300)}). It must exist and be stored as "
            "array_record; its splits are "
            f"{sorted(builder.info.splits.keys())}."
        ) from None


class Builtin(Input):
    """The standard library's docstrings (see builtin_corpus)."""

    def __init__(self):
        super().__init__(builtin_corpus.builtin_name())

    def documents(self) -> Iterator[list[str]]:
        sha, size = hashlib.sha256(), 0
        for doc in builtin_corpus.builtin_documents():
            data = ("\n".join(doc) + "\n\n").encode("utf-8")
            sha.update(data)
            size += len(data)
            yield doc
        self.record.update(bytes=size, sha256=sha.hexdigest())
