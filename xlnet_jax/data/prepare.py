"""`xlnet-jax prepare`: raw text -> normalised text -> SentencePiece -> tokenized tfds corpus.

Three passes over the data, each with a progress line on stderr:
  1. read the inputs, normalise every sentence, write them to a temporary text file;
  2. train the tokenizer on a bounded sample of those sentences (or check a given one),
     then tokenize the documents in worker processes, each document going whole to the
     train or the validation split;
  3. write the shards (shard_writer: array_record, --num_shards a split, to out_dir local or
     gs://), the tfds metadata, and manifest.json last, the mark of a complete corpus.

Where each document goes, the corpus's document order and the tokenizer's sample are pure
functions of each document's identity (document_keys), so the Apache Beam pipeline
(beam_prepare, `beam_options`) that runs the same passes on many workers writes the same
corpus: the same shard files byte for byte, hence the same token streams and fingerprint.

The output directory holds: manifest.json, spm.model, xlnet_corpus/1.0.0/ (the tfds
dataset) and, once streams have read it, cache/. Preparing into a directory that already holds a
corpus replaces it; a directory holding anything else is refused.

Memory: one chunk of documents per worker, and about 100 bytes per document; disk: the normalised
text (about the size of the input) and the token buffers while preparing, in out_dir (or, for a
gs:// out_dir, the system's temporary directory), plus one shard at a time. With Beam the driver
holds neither: the workers write the shards. Tokenizer workers are spawned processes
(safe in a process that runs jax threads); a script that calls prepare_corpus with
num_workers > 1 needs the usual `if __name__ == "__main__":` guard.
"""

import dataclasses
import multiprocessing
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from xlnet_jax import paths
from xlnet_jax.data import (
    document_keys,
    reading,
    shard_writer,
    sources,
    staging,
    tfds_builder,
    tokenizer,
    word_starts,
)
from xlnet_jax.data.manifest import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    TOKENIZER_FILE,
    Manifest,
    file_sha256,
    load_manifest,
    manifest_fingerprint,
    save_manifest,
)
from xlnet_jax.data.normalize import normalization_options
from xlnet_jax.data.prepare_notes import print_notes
from xlnet_jax.data.prepare_progress import Progress
from xlnet_jax.errors import DataError

__all__ = ["prepare_corpus", "load_manifest", "manifest_fingerprint", "Manifest"]

_OWNED = {MANIFEST_FILE, TOKENIZER_FILE, tfds_builder.NAME, "cache"}
_TEMP_PREFIX = ".prepare-"
_CHUNK_SENTENCES = 2000
BEAM_EXTRA = (
    'Preparing with Apache Beam needs the beam extra: pip install -e ".[beam]" in the '
    "project's checkout."
)


def prepare_corpus(
    inputs: list[str],
    out_dir: str,
    *,
    vocab_size: int = 32000,
    spm_model: str | None = None,
    uncased: bool = False,
    keep_accents: bool = False,
    tfds_name: str | None = None,
    tfds_text_feature: str = "text",
    tfds_split: str = "train",
    tfds_data_dir: str | None = None,
    validation_fraction: float = 0.02,
    num_workers: int | None = None,
    seed: int = 0,
    beam_options: list[str] | None = None,
    num_shards: int = shard_writer.NUM_SHARDS,
) -> Manifest:
    """Prepares a corpus directory for StreamBatcher.

    Args:
      inputs: text files or globs (one sentence per line, a blank line ends a document).
        With neither inputs nor tfds_name: the built-in corpus (stdlib docstrings).
      out_dir: the corpus directory to create (or replace, if it holds a corpus), local
        or gs://: the shards go there from whichever process writes them.
      vocab_size: pieces of the SentencePiece unigram model to train.
      spm_model: a .model to use instead of training one; its special ids are checked.
      uncased: lowercase the text (before training and tokenizing).
      keep_accents: no NFKD and no accent stripping (SentencePiece's NFKC still applies).
      tfds_name: a tfds text dataset prepared locally (array_record), read without download.
      tfds_text_feature: its feature holding the text; lines are sentences.
      tfds_split: its split to read.
      tfds_data_dir: its data dir (default: TFDS_DATA_DIR or ~/tensorflow_datasets).
      validation_fraction: share of documents held out as the validation split, in [0, 1).
      num_workers: tokenizer processes (default: the cores this process may use); unused
        with beam_options (the runner's options say how many workers).
      seed: seed of the held-out document choice.
      beam_options: run every pass in an Apache Beam pipeline with these pipeline options
        (e.g. ["--runner=DirectRunner", "--direct_num_workers=2",
        "--direct_running_mode=multi_processing"]; [] is Beam's default runner). Needs
        the beam extra. None: this process and its tokenizer workers.
      num_shards: array_record shards per split (fewer for a split of fewer documents):
        a run on up to this many hosts reads a share of the corpus on each
        (config.data_ranges, by default the run's process count).

    Returns:
      The manifest written to out_dir/manifest.json.
    """
    start = time.perf_counter()
    if not 0 <= validation_fraction < 1:
        raise DataError(f"validation_fraction must be in [0, 1), got {validation_fraction}.")
    beam = None if beam_options is None else _beam()
    model_bytes = _read_model(spm_model) if spm_model else None
    inputs_ = sources.resolve_inputs(
        inputs, tfds_name, tfds_text_feature, tfds_split, tfds_data_dir
    )
    norm = {"uncased": uncased, "keep_accents": keep_accents}
    remote = paths.is_remote(out_dir)
    (staging.claim_remote if remote else _claim)(out_dir)
    # This process's scratch: the tokenizer, the normalised text and the token buffers of
    # the one-process path. The corpus itself goes to out_dir through shard_writer.
    tmp = tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=None if remote else out_dir)
    # Beam's workers report to the driver through files in out_dir, which they reach.
    shared = f"{out_dir}/{_TEMP_PREFIX}{uuid.uuid4().hex}" if remote else tmp
    try:
        model_path = os.path.join(tmp, TOKENIZER_FILE)
        if beam is None:
            text_path = os.path.join(tmp, "normalized.txt")
            docs = _normalize_inputs(inputs_, text_path, norm, validation_fraction, seed)
            reading.check_inputs(inputs_, docs.letters)
            rule = document_keys.split_rule(validation_fraction, docs.tally)

            def sample() -> Iterator[str]:
                return _sample_sentences(text_path, docs.keys, docs.sentences)

        else:

            def sample() -> Iterator[str]:
                return beam.tokenizer_sample(inputs_, norm, shared, beam_options)

        _write_model(model_path, model_bytes, vocab_size, sample)
        paths.write_bytes_atomic(paths.as_path(out_dir) / TOKENIZER_FILE, _read(model_path))
        tokenize_start = time.perf_counter()
        if beam is None:
            held_out = np.array(
                [rule.held_out(d, k) for d, k in zip(docs.draws, docs.keys, strict=True)], bool
            )
            buffers = _tokenize(text_path, model_path, held_out, tmp, num_workers or _cores())
            buffers = {name: buf for name, buf in buffers.items() if buf.num_docs}
            shards = {
                name: shard_writer.write_split(
                    out_dir, name, buf.documents(), buf.num_docs, num_shards
                )
                for name, buf in buffers.items()
            }
            splits = {name: buf.counts() for name, buf in buffers.items()}
        else:
            splits, letters, tally, shards = beam.write_corpus(
                inputs_,
                out_dir,
                shared,
                norm,
                model_path,
                validation_fraction,
                seed,
                num_shards,
                beam_options,
            )
            reading.check_inputs(inputs_, letters)
            document_keys.split_rule(validation_fraction, tally)  # one document: its error
        files = shard_writer.finish_dataset(out_dir, shards)
        tokenize_seconds = time.perf_counter() - tokenize_start
        sp = tokenizer.load_processor(model_path)
        manifest = Manifest(
            path=out_dir,
            format_version=FORMAT_VERSION,
            vocab_size=sp.get_piece_size(),
            special_ids=dict(tokenizer.SPECIAL_IDS),
            tokenizer={
                "file": TOKENIZER_FILE,
                "sha256": file_sha256(model_path),
                "trained": model_bytes is None,
            },
            normalization=normalization_options(uncased, keep_accents),
            inputs=[i.record for i in inputs_],
            splits=splits,
            validation_fraction=validation_fraction,
            seed=seed,
            dataset={"name": tfds_builder.NAME, "version": tfds_builder.VERSION},
            stats=_stats(splits, time.perf_counter() - start, tokenize_seconds),
            files=files,
            word_starts=word_starts.rule_for(
                [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
            ),
        )
        save_manifest(manifest)  # last: it marks a complete corpus
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if shared != tmp:
            paths.retry(lambda: _remove_tree(shared), f"deleting {shared}")
    print_notes(manifest)
    print(shard_writer.hosts_line(manifest.files), file=sys.stderr)
    counts = ", ".join(f"{s['tokens']:,} {name}" for name, s in manifest.splits.items())
    print(
        f"Prepared {out_dir}: {manifest.stats['tokens']:,} tokens ({counts}) in "
        f"{manifest.stats['seconds']:.1f} s, {manifest.stats['tokens_per_second']:,} tokens/s "
        f"(tokenizing {manifest.stats['tokenize_tokens_per_second']:,} tokens/s).",
        file=sys.stderr,
    )
    return manifest


def pipeline_options(
    runner: str | None, options: str | None, num_workers: int | None
) -> list[str] | None:
    """prepare's Beam flags as pipeline options; None (no Beam) when neither is given.

    The DirectRunner runs num_workers (default: the cores) worker processes; one worker
    runs in this process (Beam 2.77's one-worker multi_processing mode lost documents
    of a 50M-token corpus here, which write_corpus's accounting now refuses).
    """
    if runner is None and options is None:
        return None
    args = ([f"--runner={runner}"] if runner else []) + shlex.split(options or "")
    workers = num_workers or _cores()
    if runner == "DirectRunner" and workers > 1:
        args += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
        args.append("--default_sdk_harness_log_level=WARNING")  # workers log every bundle
    return args


def _beam():
    """The Beam pipeline module, or a DataError naming the extra that brings Beam."""
    try:
        from xlnet_jax.data import beam_prepare
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "apache_beam":
            raise DataError(BEAM_EXTRA) from None
        raise
    return beam_prepare


def _write_model(
    model_path: str,
    model_bytes: bytes | None,
    vocab_size: int,
    sample: Callable[[], Iterable[str]],
) -> None:
    """The given model, or one trained on the tokenizer sample, to model_path."""
    if model_bytes is None:
        print(f"Training SentencePiece (unigram, {vocab_size} pieces)...", file=sys.stderr)
        tokenizer.train_tokenizer(sample(), model_path, vocab_size)
    else:
        with open(model_path, "wb") as f:
            f.write(model_bytes)


def _stats(splits: dict, seconds: float, tokenize_seconds: float) -> dict:
    """Timings for the manifest and the closing line (tokens include the <eod>s)."""
    tokens = sum(split["tokens"] for split in splits.values())
    return {
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds),
        "tokenize_tokens_per_second": round(tokens / tokenize_seconds),
    }


def _read_model(path: str) -> bytes:
    """A given tokenizer, read and checked before anything in out_dir is touched."""
    if not os.path.isfile(path):
        raise DataError(f"SentencePiece model {path} does not exist; check spm_model.")
    tokenizer.check_special_ids(tokenizer.load_processor(path), path)
    with open(path, "rb") as f:
        return f.read()


def _claim(out_dir: str) -> None:
    """Empties out_dir of a previous corpus; refuses to touch anything that is not one."""
    os.makedirs(out_dir, exist_ok=True)
    entries = os.listdir(out_dir)
    foreign = [e for e in entries if e not in _OWNED and not e.startswith(_TEMP_PREFIX)]
    if foreign:
        raise DataError(
            f"{out_dir} is not empty and not a prepared corpus (it holds {sorted(foreign)[:3]}"
            "...); pick a new or empty directory."
        )
    for entry in entries:
        path = os.path.join(out_dir, entry)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


@dataclasses.dataclass
class _Documents:
    """Pass 1's account of the documents, in corpus order: keys, split draws, tally."""

    keys: list[int] = dataclasses.field(default_factory=list)
    draws: list[int] = dataclasses.field(default_factory=list)
    tally: document_keys.SplitTally = document_keys.SplitTally()
    sentences: int = 0
    letters: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])


def _normalize_inputs(
    inputs: list[sources.Input], text_path: str, norm: dict, fraction: float, seed: int
) -> _Documents:
    """Pass 1: normalised sentences to text_path, documents separated by a blank line."""
    progress = Progress("Reading and normalising", 0, "docs")
    docs, threshold = _Documents(), document_keys.threshold(fraction)
    with open(text_path, "w", encoding="utf-8") as out:
        for position, source in enumerate(inputs):
            for key, lines in reading.normalized_documents(source, position, norm, docs.letters):
                out.write("\n".join(lines) + "\n\n")
                draw = document_keys.split_hash(seed, key)
                docs.keys.append(key)
                docs.draws.append(draw)
                docs.tally = docs.tally.add(draw, key, threshold)
                docs.sentences += len(lines)
                progress.update(1)
    progress.close()
    return docs


def _sample_sentences(text_path: str, keys: list[int], total: int) -> Iterator[str]:
    """The tokenizer's sample (document_keys.in_tokenizer_sample) from pass 1's text."""
    cap = tokenizer.TRAIN_SENTENCES
    for key, doc in zip(keys, _read_documents(text_path), strict=True):
        for i, line in enumerate(doc):
            if total <= cap or document_keys.in_tokenizer_sample(key, i, total, cap):
                yield line


class _SplitBuffer:
    """One split's tokenized documents, appended to raw int32 files in the temp directory."""

    def __init__(self, directory: str, name: str):
        self._base = os.path.join(directory, name)
        self._files = {k: open(f"{self._base}.{k}", "wb") for k in ("tokens", "lengths", "counts")}
        self.num_docs = self.num_sentences = self.num_tokens = 0

    def append(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        tokens.tofile(self._files["tokens"])
        lengths.tofile(self._files["lengths"])
        np.int32(len(lengths)).tofile(self._files["counts"])
        self.num_docs += 1
        self.num_sentences += len(lengths)
        self.num_tokens += len(tokens)

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def counts(self) -> dict:
        """The manifest's split entry; tokens include one <eod> per document."""
        tokens = self.num_tokens + self.num_docs
        return {"documents": self.num_docs, "sentences": self.num_sentences, "tokens": tokens}

    def documents(self) -> Iterator[tfds_builder.Document]:
        progress = Progress(f"Writing {os.path.basename(self._base)}", self.num_docs, "docs")
        tokens = np.fromfile(f"{self._base}.tokens", dtype=np.int32)
        lengths = np.fromfile(f"{self._base}.lengths", dtype=np.int32)
        counts = np.fromfile(f"{self._base}.counts", dtype=np.int32)
        t = s = 0
        for count in counts:
            doc_lengths = lengths[s : s + count]
            size = int(doc_lengths.sum())
            yield tokens[t : t + size], doc_lengths
            t, s = t + size, s + count
            progress.update(1)
        progress.close()


def _read_documents(text_path: str) -> Iterator[list[str]]:
    """The documents of pass 1's text, as lists of lines."""
    doc = []
    with open(text_path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                doc.append(line)
            else:
                yield doc
                doc = []


def _read_chunks(text_path: str) -> Iterator[list[list[str]]]:
    """Documents from the normalised text, grouped into chunks of ~2000 sentences."""
    chunk, size = [], 0
    for doc in _read_documents(text_path):
        chunk.append(doc)
        size += len(doc)
        if size >= _CHUNK_SENTENCES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _tokenize(
    text_path: str, model_path: str, held_out: np.ndarray, tmp: str, workers: int
) -> dict[str, _SplitBuffer]:
    """Pass 2: encodes every document (in `workers` processes) into its split's buffer."""
    splits = {"train": _SplitBuffer(tmp, "train"), "validation": _SplitBuffer(tmp, "validation")}
    progress = Progress("Tokenizing", len(held_out), "docs")
    chunks = _read_chunks(text_path)
    pool = None
    if workers > 1:
        # spawn, not fork: the caller may have started threads (jax) that fork would copy.
        pool = multiprocessing.get_context("spawn").Pool(
            workers, initializer=tokenizer.init_worker, initargs=(model_path,)
        )
        encoded = pool.imap(tokenizer.encode_documents, chunks)
    else:
        tokenizer.init_worker(model_path)
        encoded = map(tokenizer.encode_documents, chunks)
    try:
        index = 0
        for chunk in encoded:
            for tokens, lengths in chunk:
                if len(tokens):
                    splits["validation" if held_out[index] else "train"].append(tokens, lengths)
                index += 1
            progress.update(len(chunk))
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        for buf in splits.values():
            buf.close()
    progress.close()
    return splits


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _remove_tree(url: str) -> None:
    path = paths.as_path(url)
    if path.exists():
        path.rmtree()


def _cores() -> int:
    return len(os.sched_getaffinity(0))
