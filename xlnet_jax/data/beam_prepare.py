"""`prepare` on Apache Beam: the passes of prepare.py as one pipeline on a runner's workers.

prepare_corpus(beam_options=[...]) calls this module (it needs the beam extra); the runner
comes from the options alone: the DirectRunner with N local worker processes, or
Dataflow, Flink or Spark. The pipeline, built through tensorflow-datasets' Beam support
(the builder's split generators are PCollections), does every pass:

  read        one element per input: a worker reads it whole (sources.py, counting its
              damaged lines) and normalises it; inputs spread over workers, so a corpus
              of many files reads in parallel (split one huge file to parallelise it);
  split       each document's draw (document_keys), a global tally of the draws as a
              side input, then each document's split;
  tokenize    per document, the SentencePiece model shipped inside the step;
  write       tfds's Beam writer: array_record shards, documents in key order;
  account     per-input records (bytes, sha256, damage), split counts and the accent
              tally, written as JSON lines to the temporary directory the driver reads.

Training a tokenizer adds one pipeline before: read and normalise, count the sentences,
keep the document_keys sample, which the driver sorts by key and trains on. Everything is
a function of the documents' keys, so the corpus equals the one-process path's, token for
token, whatever the runner, the worker count or the order the runner works in.
"""

import json
import os
from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import sentencepiece as spm
import tensorflow_datasets as tfds
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from xlnet_jax.data import document_keys, reading, sources, tfds_builder, tokenizer
from xlnet_jax.errors import DataError

_DOCS, _RECORDS = "docs", "records"
_EMPTY = "empty"  # documents that encode to no token: counted, not written


def tokenizer_sample(
    inputs: list[sources.Input], norm: dict, tmp: str, options: list[str]
) -> Iterator[str]:
    """The sentences that train the tokenizer, in key order (see document_keys)."""
    cap = tokenizer.TRAIN_SENTENCES
    with beam.Pipeline(options=_options(options)) as pipeline:
        sentences = _read(pipeline, inputs, norm)[_DOCS] | "Sentences" >> beam.FlatMap(
            lambda d: ((d[0], i, s) for i, s in enumerate(d[1]))
        )
        total = sentences | "Count" >> beam.combiners.Count.Globally()
        _ = (
            sentences
            | "Sample" >> beam.Filter(_in_sample, total=beam.pvalue.AsSingleton(total), cap=cap)
            | "Encode" >> beam.Map(json.dumps)
            | "Write" >> beam.io.WriteToText(os.path.join(tmp, "sample"))
        )
    sample = sorted(_read_lines(os.path.join(tmp, "sample")))
    if not sample:
        raise DataError(reading.NO_TEXT)
    return (sentence for _, _, sentence in sample)


def _in_sample(sentence: tuple, total: int, cap: int) -> bool:
    key, index, _ = sentence
    return total <= cap or document_keys.in_tokenizer_sample(key, index, total, cap)


def write_corpus(
    inputs: list[sources.Input],
    out_dir: str,
    tmp: str,
    norm: dict,
    model_path: str,
    fraction: float,
    seed: int,
    options: list[str],
) -> tuple[dict, list[int], document_keys.SplitTally]:
    """Writes the tfds dataset of out_dir; fills each input's record.

    Returns:
      The manifest's splits ({name: {"documents", "sentences", "tokens"}}), the accent
      tally [characters, non-ASCII letters, of them lost] and the split tally, whose
      split_rule the caller checks (a corpus of one document is refused).
    """
    with open(model_path, "rb") as f:
        model = f.read()
    names = ["train", "validation"] if fraction else ["train"]

    def build(pipeline) -> dict:
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
        _write_json(read[_RECORDS], tmp, "records")
        _write_json(tally | "TallyFields" >> beam.Map(_tally_fields), tmp, "tally")
        examples = {}
        for name, part in zip([*names, _EMPTY], parts, strict=True):
            counts = (
                part
                | f"Count{name}" >> beam.Map(lambda d: (1, len(d[3]), len(d[2]) + 1))
                | f"Sum{name}" >> beam.CombineGlobally(_SumFn())
            )
            _write_json(counts | f"Label{name}" >> beam.Map(lambda c, n=name: (n, c)), tmp, name)
            if name != _EMPTY:
                examples[name] = part | f"Examples{name}" >> beam.Map(
                    lambda d: (d[0], {"tokens": d[2], "sentence_lengths": d[3]})
                )
        return examples

    builder = _BeamCorpus(build=build, data_dir=out_dir, file_format="array_record")
    config = tfds.download.DownloadConfig(beam_options=_options(options))
    tfds_builder.prepare_builder(builder, out_dir, config)
    found = _read_lines(os.path.join(tmp, "tally"))
    if len(found) != 1:
        raise DataError(
            f"The pipeline's workers wrote nothing this process can read in {tmp}: a runner "
            "on other machines needs the output directory on a filesystem they share."
        )
    (fields,) = found
    tally = document_keys.SplitTally(*_tuples(*fields))
    letters = [0, 0, 0]
    for position, record, counts in _read_lines(os.path.join(tmp, "records")):
        inputs[position].record.update(record)
        letters = [a + b for a, b in zip(letters, counts, strict=True)]
    splits, accounted = {}, 0
    for name in [*names, _EMPTY]:
        for _, (docs, sentences, tokens) in _read_lines(os.path.join(tmp, name)):
            accounted += docs
            if docs and name != _EMPTY:
                splits[name] = {"documents": docs, "sentences": sentences, "tokens": tokens}
    read = sum(source.record["documents"] for source in inputs)
    if not read == tally.count == accounted:
        raise DataError(
            f"The Beam runner lost documents: {read:,} read, {tally.count:,} split, "
            f"{accounted:,} tokenized. The corpus in {out_dir} is incomplete; prepare again "
            "(another runner or worker count, or without Beam)."
        )
    return splits, letters, tally


class _BeamCorpus(tfds_builder.XlnetCorpus, skip_registration=True):
    """The corpus builder whose splits are PCollections of the pipeline `build` makes."""

    name = tfds_builder.NAME

    def __init__(self, *, build, **kwargs):
        self._build = build
        super().__init__(**kwargs)

    def _split_generators(self, dl_manager, pipeline):
        del dl_manager  # nothing is downloaded
        return self._build(pipeline)


def _options(options: list[str]) -> PipelineOptions:
    return PipelineOptions(options)


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

    def process(self, element):
        key, draw, lines = element
        ((tokens, lengths),) = tokenizer.encode_with(self._sp, [lines])
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


def _write_json(values, tmp: str, name: str) -> None:
    _ = (
        values
        | f"Json{name}" >> beam.Map(lambda v: json.dumps(v, default=_plain))
        | f"Write{name}" >> beam.io.WriteToText(os.path.join(tmp, name))
    )


def _plain(value):
    """numpy integers (token counts) as JSON numbers."""
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _read_lines(prefix: str) -> list:
    """The JSON values WriteToText wrote to the files prefix-*, on any Beam filesystem."""
    values = []
    for match in FileSystems.match([prefix + "-*"])[0].metadata_list:
        with FileSystems.open(match.path) as f:
            values += [json.loads(line) for line in f.read().decode("utf-8").splitlines()]
    return values
