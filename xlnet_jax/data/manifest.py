"""manifest.json: what a prepared corpus was made from and with, and its fingerprint.

Training stores the fingerprint with its checkpoints and refuses to resume on a corpus
whose fingerprint differs: another tokenizer, other input content, other normalisation,
another split, another word-start rule. File paths, timings and empty inputs are recorded
but not fingerprinted, so a moved input with the same bytes is the same corpus, and so is
one beside an empty file.
"""

import dataclasses
import hashlib
import json
import os

from xlnet_jax import paths
from xlnet_jax.data import word_starts
from xlnet_jax.errors import DataError

# 2: the validation choice, document order and tokenizer sample are functions of each
# document (data/document_keys.py), the same on one process and on Apache Beam. A corpus of
# format 1 (a seeded draw over the document count) has the same layout and is read as is;
# its fingerprint is unchanged.
# 3: text is encoded with the original's digit-comma split (data/tokenizer.py): a piece
# ending in a digit and "," is split as XLNet's prepro_utils.encode_pieces does. Corpora of
# formats 1 and 2 are read as they are (their ids are what they were); the version is in the
# fingerprint, so a run never resumes across the change of ids unnoticed.
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "spm.model"


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A prepared corpus's description (the JSON file, plus where it was loaded from).

    Attributes:
      path: the corpus directory (not stored in the file).
      format_version: how the corpus was made (FORMAT_VERSION); readers refuse one not in
        READABLE_FORMATS.
      vocab_size: pieces in the tokenizer; config.vocab_size must equal it.
      special_ids: piece -> id of <unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop>.
      tokenizer: {"file", "sha256", "trained"}: the .model in the corpus directory.
      normalization: the options of normalize.normalize that the text went through
        (nfkd_strip_accents false: prepared with --keep_accents).
      inputs: per input {"path", "bytes", "sha256", "documents", "sentences",
        "invalid_utf8_lines", "control_char_lines", "long_lines"[, "first_invalid_utf8_offset",
        "first_control_char_offset", "first_long_line_offset", "skipped": "empty" or
        "no text"]}: lines skipped (invalid UTF-8, longer than sources.MAX_LINE_BYTES) or
        cleaned (control characters), and files with nothing or only blanks skipped.
      splits: per split {"documents", "sentences", "tokens"}; tokens count the stream,
        i.e. including one <eod> per document.
      validation_fraction: the chance of each document to be held out (whole documents;
        document_keys.split_rule).
      seed: seed of the held-out choice (document_keys.split_hash).
      dataset: {"name", "version"} of the tfds dataset in the directory.
      stats: timings of the preparation (not fingerprinted).
      files: relative path -> {"bytes", "sha256"} of every file of the tfds dataset, so a
        copy (a corpus staged from object storage) can be verified (not fingerprinted: the
        dataset is a function of what is).
      word_starts: the rule in effect that marks word starts for the PLM spans
        (word_starts.RULES); absent from corpora prepared before it, which keep "marker".
        Fingerprinted only when it is not "marker", so those corpora, and English ones
        prepared since (whose table is the same), keep their fingerprint.
    """

    path: str
    format_version: int
    vocab_size: int
    special_ids: dict
    tokenizer: dict
    normalization: dict
    inputs: list
    splits: dict
    validation_fraction: float
    seed: int
    dataset: dict
    stats: dict
    files: dict = dataclasses.field(default_factory=dict)
    word_starts: str = word_starts.MARKER

    @property
    def tokenizer_path(self) -> str:
        return os.fspath(paths.as_path(self.path) / self.tokenizer["file"])

    @property
    def keep_accents(self) -> bool:
        return not self.normalization["nfkd_strip_accents"]

    @property
    def uncased(self) -> bool:
        return self.normalization["lowercase"]


def save_manifest(manifest: Manifest) -> None:
    """Writes path/manifest.json atomically (it marks a complete corpus)."""
    fields = dataclasses.asdict(manifest)
    del fields["path"]
    text = json.dumps(fields, indent=2, sort_keys=True) + "\n"
    paths.write_bytes_atomic(paths.as_path(manifest.path) / MANIFEST_FILE, text.encode())


def load_manifest(corpus_dir: str) -> Manifest:
    """The manifest of a prepared corpus, or a DataError saying how to prepare one."""
    target = paths.as_path(corpus_dir) / MANIFEST_FILE
    try:
        fields = json.loads(paths.retry(target.read_text, f"reading {target}"))
    except FileNotFoundError:
        raise DataError(
            f"{corpus_dir} is not a prepared corpus (no {MANIFEST_FILE}); run "
            f"`xlnet-jax prepare --out {corpus_dir} [FILES]` first."
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"{target} is unreadable ({e}); prepare the corpus again.") from None
    if fields.get("format_version") not in READABLE_FORMATS:
        raise DataError(
            f"{corpus_dir} has corpus format {fields.get('format_version')}, this version reads "
            f"{', '.join(map(str, READABLE_FORMATS))}; prepare the corpus again."
        )
    rule = fields.get("word_starts", word_starts.MARKER)
    if rule not in word_starts.RULES:
        raise DataError(
            f"{target}: word_starts {rule!r} is not one this version knows "
            f"({', '.join(word_starts.RULES)}); prepare the corpus again."
        )
    return Manifest(path=corpus_dir, **fields)


def manifest_fingerprint(manifest: Manifest) -> str:
    """A hex sha256 that changes with anything that changes the token streams or their
    word starts."""
    content = {
        "format_version": manifest.format_version,
        "vocab_size": manifest.vocab_size,
        "special_ids": manifest.special_ids,
        "tokenizer_sha256": manifest.tokenizer["sha256"],
        "normalization": manifest.normalization,
        "inputs": [(i["sha256"], i["bytes"]) for i in manifest.inputs if i["bytes"]],
        "splits": manifest.splits,
        "validation_fraction": manifest.validation_fraction,
        "seed": manifest.seed,
    }
    if manifest.word_starts != word_starts.MARKER:
        content["word_starts"] = manifest.word_starts
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def file_sha256(path: str) -> str:
    """The sha256 of a local file, as the manifest records its tokenizer's and staging
    checks each staged file."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
