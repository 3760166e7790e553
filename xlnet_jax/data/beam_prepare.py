"""`prepare` on Apache Beam: the passes of prepare.py as one pipeline on a runner's workers.

prepare_corpus(beam_options=[...]) calls this module (it needs the beam extra); the runner
comes from the options alone: the DirectRunner with N local worker processes, or
Dataflow, Flink or Spark (_pipeline). The pipeline does every pass:

  read        one element per input: a worker reads it whole (sources.py, counting its
              damaged lines) and normalises it; inputs spread over workers, so a corpus
              of many files reads in parallel (split one huge file to parallelise it);
  split       each document's draw (document_keys), a global tally of the draws as a
              side input, then each document's split;
  tokenize    per document, the SentencePiece model shipped inside the step;
  write       the documents of each input ranked in one worker, after the inputs
              before it; each shard's documents grouped and written by one worker to
              the output directory, local or gs:// (shard_writer: a local temporary
              file, uploaded, committed, deleted);
  account     per-input records (bytes, sha256, damage), split counts, the accent
              tally and the committed shards, written as JSON lines to a folder in
              the output directory that the driver reads (the workers share no disk
              with the driver).

Training a tokenizer adds one pipeline before: read and normalise, count the sentences,
keep the document_keys sample, which the driver sorts by key and trains on. Everything is
a function of the documents' keys, so the corpus equals the one-process path's, token for
token, whatever the runner, the worker count or the order the runner works in.
"""

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import sentencepiece as spm
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.job import utils as job_utils
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.fn_api_runner import FnApiRunner, fn_runner

from xlnet_jax import paths
from xlnet_jax.data import document_keys, reading, shard_writer, sources, tokenizer
from xlnet_jax.errors import DataError

_DOCS, _RECORDS = "docs", "records"
_WORKER_OPTIONS = {"default_sdk_harness_log_level": "WARNING"}
_EMPTY = "empty"  # documents that encode to no token: counted, not written


def tokenizer_sample(
    inputs: list[sources.Input], norm: dict, shared: str, options: list[str]
) -> Iterator[str]:
    """The sentences that train the tokenizer, in key order (see document_keys); the
    workers hand them over through files in `shared` (local or gs://)."""
    cap = tokenizer.TRAIN_SENTENCES
    with _pipeline(options) as pipeline:
        sentences = _read(pipeline, inputs, norm)[_DOCS] | "Sentences" >> beam.FlatMap(
            lambda d: ((d[0], i, s) for i, s in enumerate(d[1]))
        )
        total = sentences | "Count" >> beam.combiners.Count.Globally()
        sample = sentences | "Sample" >> beam.Filter(
            _in_sample, total=beam.pvalue.AsSingleton(total), cap=cap
        )
        _write_json(sample, shared, "sample")
    sample = sorted(_read_lines(shared, "sample"))
    if not sample:
        raise DataError(reading.NO_TEXT)
    return (sentence for _, _, sentence in sample)


def _in_sample(sentence: tuple, total: int, cap: int) -> bool:
    key, index, _ = sentence
    return total <= cap or document_keys.in_tokenizer_sample(key, index, total, cap)


def write_corpus(
    inputs: list[sources.Input],
    out_dir: str,
    shared: str,
    norm: dict,
    model_path: str,
    fraction: float,
    seed: int,
    num_shards: int,
    options: list[str],
) -> tuple[dict, list[int], document_keys.SplitTally, dict]:
    """Writes the corpus's shards to out_dir (local or gs://) from the workers; fills each
    input's record. The workers report to this process through files in `shared`.

    Returns:
      The manifest's splits ({name: {"documents", "sentences", "tokens"}}), the accent
      tally [characters, non-ASCII letters, of them lost], the split tally, whose
      split_rule the caller checks (a corpus of one document is refused), and the shards
      the workers committed ({split: [shard_writer.ShardRecord]}) for
      shard_writer.finish_dataset.
    """
    with open(model_path, "rb") as f:
        model = f.read()
    names = ["train", "validation"] if fraction else ["train"]
    with _pipeline(options) as pipeline:
        read = _read(pipeline, inputs, norm)
        limit = document_keys.threshold(fraction)
        drawn = read[_DOCS] | "Draw" >> beam.Map(
            lambda doc: (doc[0], document_keys.split_hash(seed, doc[0]), doc[1])
        )
        tally = drawn | "Tally" >> beam.CombineGlobally(_TallyFn(limit))
        rule = tally | "Rule" >> beam.Map(_rule_or_none, fraction)
        parts = (
            drawn
            | "Tokenize" >> beam.ParDo(_Tokenize(model))
            | "Split"
            >> beam.Partition(_split_of, len(names) + 1, rule=beam.pvalue.AsSingleton(rule))
        )
        _write_json(read[_RECORDS], shared, "records")
        _write_json(tally | "TallyFields" >> beam.Map(_tally_fields), shared, "tally")
        for name, part in zip([*names, _EMPTY], parts, strict=True):
            counts = (
                part
                | f"Count{name}" >> beam.Map(lambda d: (1, len(d[3]), len(d[2]) + 1))
                | f"Sum{name}" >> beam.CombineGlobally(_SumFn())
            )
            _write_json(counts | f"Label{name}" >> beam.Map(lambda c, n=name: (n, c)), shared, name)
            if name != _EMPTY:
                shards = _write_shards(part, name, out_dir, num_shards)
                _write_json(shards, shared, f"shards-{name}")
    found = _read_lines(shared, "tally")
    if len(found) != 1:
        raise DataError(
            f"The pipeline's workers left no result this process can read in {shared}: a "
            "runner on other machines needs an output directory they reach (gs://, or a "
            "filesystem they share)."
        )
    (fields,) = found
    tally = document_keys.SplitTally(*_tuples(*fields))
    letters = [0, 0, 0]
    for position, record, counts in _read_lines(shared, "records"):
        inputs[position].record.update(record)
        letters = [a + b for a, b in zip(letters, counts, strict=True)]
    splits, shards, accounted = {}, {}, 0
    for name in [*names, _EMPTY]:
        for _, (docs, sentences, tokens) in _read_lines(shared, name):
            accounted += docs
            if docs and name != _EMPTY:
                splits[name] = {"documents": docs, "sentences": sentences, "tokens": tokens}
                records = _read_lines(shared, f"shards-{name}")
                shards[name] = [shard_writer.ShardRecord(*fields) for fields in records]
    read = sum(source.record["documents"] for source in inputs)
    if not read == tally.count == accounted:
        raise DataError(
            f"The Beam runner lost documents: {read:,} read, {tally.count:,} split, "
            f"{accounted:,} tokenized. The corpus in {out_dir} is incomplete; prepare again "
            "(another runner or worker count, or without Beam)."
        )
    return splits, letters, tally, shards


def _write_shards(part, name: str, out_dir: str, num_shards: int):
    """The documents of split `name` as its shards, written by the workers; a
    PCollection of the ShardRecords (as tuples) they committed.

    A document's shard follows from its rank in the split (shard_writer.shard_of): the
    documents of each input are ranked in one worker, after the documents of the inputs
    before it (a side input of each input's document count).
    """
    by_input = part | f"ByInput{name}" >> beam.Map(
        lambda d: (d[0] >> document_keys.INDEX_BITS, (d[0], d[2], d[3]))
    )
    sizes = by_input | f"Sizes{name}" >> beam.combiners.Count.PerKey()
    return (
        by_input
        | f"GroupInputs{name}" >> beam.GroupByKey()
        | f"Place{name}"
        >> beam.FlatMap(_place, sizes=beam.pvalue.AsDict(sizes), num_shards=num_shards)
        | f"GroupShards{name}" >> beam.GroupByKey()
        | f"WriteShards{name}" >> beam.Map(_write_shard, out_dir, name)
    )


def _place(element, sizes: dict, num_shards: int):
    """((shard, shards), (key, tokens, lengths)) for each document of one input."""
    position, docs = element
    total = sum(sizes.values())
    first = sum(size for other, size in sizes.items() if other < position)
    count = shard_writer.shard_count(total, num_shards)
    for rank, doc in enumerate(sorted(docs, key=lambda d: d[0]), start=first):
        yield (shard_writer.shard_of(rank, total, count), count), doc


def _write_shard(element, out_dir: str, split: str) -> tuple:
    (index, count), docs = element
    ordered = ((tokens, lengths) for _, tokens, lengths in sorted(docs, key=lambda d: d[0]))
    record = shard_writer.write_shard(out_dir, split, index, count, ordered)
    return dataclasses.astuple(record)


def _pipeline(options: list[str]) -> beam.Pipeline:
    """A pipeline on the runner the options name. The DirectRunner (named, or Beam's
    default) is Beam's FnApiRunner, in this process or, with
    --direct_running_mode=multi_processing, on --direct_num_workers SDK worker processes
    over the Fn API: no Prism runner (which the DirectRunner would try first, downloading
    its binary)."""
    parsed = PipelineOptions(options)
    runner = parsed.view_as(StandardOptions).runner
    if runner not in (None, "DirectRunner"):
        return beam.Pipeline(options=parsed)
    # The workers log warnings only (FnApiRunner would hand them no options: INFO); each
    # prints its warnings (damaged input) on its stderr, so the runner's copy of each,
    # a proto dump, is not logged again.
    info = beam_provision_api_pb2.ProvisionInfo(
        pipeline_options=job_utils.dict_to_struct({"options": _WORKER_OPTIONS}),
        retrieval_token="unused-retrieval-token",
    )
    logging.getLogger(local_job_service.__name__).setLevel(logging.ERROR)
    runner = FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(info))
    return beam.Pipeline(runner=runner, options=parsed)


def _read(pipeline, inputs: list[sources.Input], norm: dict):
    """Tagged outputs: _DOCS, (key, normalised lines) per document with text; _RECORDS,
    (position, manifest record, accent tally) per input."""
    return (
        pipeline
        | "Inputs" >> beam.Create(list(enumerate(inputs)), reshuffle=False)
        | "Spread" >> beam.Reshuffle()
        | "Read" >> beam.ParDo(_ReadInput(norm)).with_outputs(_RECORDS, main=_DOCS)
    )


class _ReadInput(beam.DoFn):
    """Reads and normalises one input (reading.normalized_documents)."""

    def __init__(self, norm: dict):
        self._norm = norm

    def process(self, element):
        position, source = element
        letters = [0, 0, 0]
        yield from reading.normalized_documents(source, position, self._norm, letters)
        yield beam.pvalue.TaggedOutput(_RECORDS, (position, source.record, letters))


class _Tokenize(beam.DoFn):
    """(key, draw, lines) -> (key, draw, tokens, sentence lengths). A document that encodes
    to nothing goes to the _EMPTY part: counted, not written (the one-process path drops
    it too)."""

    def __init__(self, model: bytes):
        self._model = model

    def setup(self):
        self._sp = spm.SentencePieceProcessor(model_proto=self._model)
        self._splits = tokenizer.digit_comma_splits(self._sp)

    def process(self, element):
        key, draw, lines = element
        ((tokens, lengths),) = tokenizer.encode_with(self._sp, [lines], self._splits)
        yield key, draw, tokens, lengths


class _TallyFn(beam.CombineFn):
    """document_keys.SplitTally over (key, draw, lines)."""

    def __init__(self, limit: int):
        self._limit = limit

    def create_accumulator(self):
        return document_keys.SplitTally()

    def add_input(self, tally, doc):
        return tally.add(doc[1], doc[0], self._limit)

    def merge_accumulators(self, tallies):
        merged = document_keys.SplitTally()
        for tally in tallies:
            merged = merged.merge(tally)
        return merged

    def extract_output(self, tally):
        return tally


class _SumFn(beam.CombineFn):
    """Element-wise sum of (documents, sentences, tokens)."""

    def create_accumulator(self):
        return (0, 0, 0)

    def add_input(self, total, counts):
        return tuple(a + b for a, b in zip(total, counts, strict=True))

    def merge_accumulators(self, totals):
        return tuple(int(sum(column)) for column in zip(*totals, strict=True))

    def extract_output(self, total):
        return total


def _rule_or_none(tally: document_keys.SplitTally, fraction: float):
    """The split rule; None for a corpus it refuses (the driver raises its error)."""
    if fraction and tally.count < 2:
        return None
    return document_keys.split_rule(fraction, tally)


def _split_of(doc: tuple, num_parts: int, rule) -> int:
    """0 train, 1 validation (if any), the last part: documents without tokens."""
    if not len(doc[2]):
        return num_parts - 1
    return int(num_parts > 2 and rule is not None and rule.held_out(doc[1], doc[0]))


def _tally_fields(tally: document_keys.SplitTally) -> list:
    return [tally.count, tally.below, tally.smallest, tally.largest]


def _tuples(count, below, smallest, largest) -> tuple:
    """_tally_fields read back from JSON (pairs come back as lists)."""
    return count, below, smallest and tuple(smallest), largest and tuple(largest)


def _write_json(values, shared: str, name: str) -> None:
    """Each value as a JSON line, in files `name`-*.jsonl in `shared` (_JsonFiles)."""
    _ = values | f"Json{name}" >> beam.ParDo(_JsonFiles(shared, name))


class _JsonFiles(beam.DoFn):
    """Writes each bundle's values as one file named by its content, so a bundle run
    again writes the same file, not a second one (_read_lines drops repeated lines too:
    every value written is distinct)."""

    def __init__(self, shared: str, name: str):
        self._shared, self._name = shared, name

    def start_bundle(self):
        self._lines = []

    def process(self, value):
        self._lines.append(json.dumps(value, default=_plain))

    def finish_bundle(self):
        if not self._lines:
            return
        data = "\n".join(self._lines).encode() + b"\n"
        name = f"{self._name}-{hashlib.sha256(data).hexdigest()[:16]}.jsonl"
        paths.write_bytes_atomic(paths.as_path(self._shared) / name, data)


def _plain(value):
    """numpy integers (token counts) as JSON numbers."""
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _read_lines(shared: str, name: str) -> list:
    """The distinct JSON values _write_json wrote as `name` to `shared`."""
    lines = set()
    for relative in shard_writer.list_files(shared):
        if os.path.basename(relative).startswith(f"{name}-"):
            data = paths.retry((paths.as_path(shared) / relative).read_text, f"reading {relative}")
            lines.update(data.splitlines())
    return [json.loads(line) for line in sorted(lines)]
