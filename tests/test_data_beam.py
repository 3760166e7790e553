"""prepare on Apache Beam (DirectRunner) writes the corpus the one-process path writes."""

import os
import sys

import pytest
from test_data_common import english_text, scratch, small_corpus

import xlnet_jax.data
from xlnet_jax.data import tfds_builder, tokenizer
from xlnet_jax.data.prepare import (
    load_manifest,
    manifest_fingerprint,
    pipeline_options,
    prepare_corpus,
)
from xlnet_jax.errors import DataError

TWO_WORKERS = pipeline_options("DirectRunner", None, 2)
IN_PROCESS = ["--runner=DirectRunner"]


def damaged_inputs() -> str:
    """Four files: the English text cut in three, each with a damaged line of another kind,
    and an empty one."""
    directory = scratch("beam-inputs")
    with open(english_text(), "rb") as f:
        docs = f.read().split(b"\n\n")
    damage = [b"Bad \xff byte here.\n", b"A NUL\x00 and an ESC\x1b[0m.\n", b"QUJD" * 20_000 + b"\n"]
    for part, bad in enumerate(damage):
        with open(os.path.join(directory, f"part-{part}.txt"), "wb") as f:
            third = docs[part * len(docs) // 3 : (part + 1) * len(docs) // 3]
            f.write(b"\n\n".join(third[:2]) + b"\n" + bad + b"\n" + b"\n\n".join(third[2:]))
    open(os.path.join(directory, "part-3.txt"), "wb").close()
    return os.path.join(directory, "part-*.txt")


def documents(corpus: str, split: str) -> list:
    return [(t.tolist(), n.tolist()) for t, n in tfds_builder.read_documents(corpus, split)]


def test_two_beam_workers_write_the_one_process_corpus_token_for_token():
    inputs, model = damaged_inputs(), load_manifest(small_corpus()).tokenizer_path
    common = dict(spm_model=model, validation_fraction=0.1, seed=3)
    one = prepare_corpus([inputs], scratch("one"), num_workers=1, **common)
    beam = prepare_corpus([inputs], scratch("beam"), beam_options=TWO_WORKERS, **common)
    for split in ("train", "validation"):
        assert documents(beam.path, split) == documents(one.path, split), split
    assert manifest_fingerprint(beam) == manifest_fingerprint(one)
    assert beam.files == one.files  # every shard and metadata file, byte for byte
    assert beam.splits == one.splits and beam.splits["validation"]["documents"] > 1
    assert beam.inputs == one.inputs  # damage counts and their first offsets included
    kinds = ("invalid_utf8_lines", "control_char_lines", "long_lines")
    damage = [tuple(r[k] for k in kinds) for r in beam.inputs]
    assert damage == [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, 0)]
    assert beam.inputs[3]["skipped"] == "empty"


def test_beam_trains_the_tokenizer_on_the_same_sample(monkeypatch):
    """A cap below the corpus's sentences: both paths draw the same sample, train the same
    model byte for byte, and tokenize alike."""
    monkeypatch.setattr(tokenizer, "TRAIN_SENTENCES", 600)
    common = dict(vocab_size=300, validation_fraction=0.1)
    one = prepare_corpus([english_text()], scratch("one"), num_workers=1, **common)
    beam = prepare_corpus([english_text()], scratch("beam"), beam_options=IN_PROCESS, **common)
    assert one.inputs[0]["sentences"] > 2 * 600
    assert beam.tokenizer == one.tokenizer
    assert manifest_fingerprint(beam) == manifest_fingerprint(one)
    assert documents(beam.path, "validation") == documents(one.path, "validation")


def test_without_beam_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # import apache_beam fails
    monkeypatch.delitem(sys.modules, "xlnet_jax.data.beam_prepare", raising=False)
    monkeypatch.delattr(xlnet_jax.data, "beam_prepare", raising=False)
    out = scratch("no-beam")
    with pytest.raises(DataError, match=r'needs the beam extra: pip install -e "\.\[beam\]"'):
        prepare_corpus([english_text()], out, beam_options=IN_PROCESS)
    assert os.listdir(out) == []


def test_beam_flags_become_pipeline_options():
    assert pipeline_options(None, None, 4) is None  # the one-process path
    assert pipeline_options("DirectRunner", None, 2) == [
        "--runner=DirectRunner",
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
        "--default_sdk_harness_log_level=WARNING",
    ]
    dataflow = "--project=p --region=europe-west4 --temp_location=gs://b/tmp"
    assert pipeline_options("DataflowRunner", dataflow, 2) == [
        "--runner=DataflowRunner",
        "--project=p",
        "--region=europe-west4",
        "--temp_location=gs://b/tmp",
    ]
    assert pipeline_options(None, "--runner=FlinkRunner", None) == ["--runner=FlinkRunner"]
    assert pipeline_options("DirectRunner", None, 1) == ["--runner=DirectRunner"]


def test_beam_reads_a_local_tfds_text_dataset_as_the_one_process_path_does():
    from test_data_prepare import TinyTextDocs

    data_dir = scratch("tfds")
    TinyTextDocs(data_dir=data_dir, file_format="array_record").download_and_prepare()
    common = dict(
        spm_model=load_manifest(small_corpus()).tokenizer_path,
        tfds_name="tiny_text_docs",
        tfds_text_feature="body",
        tfds_data_dir=data_dir,
        validation_fraction=0.2,
    )
    one = prepare_corpus([], scratch("one"), num_workers=1, **common)
    beam = prepare_corpus([], scratch("beam"), beam_options=IN_PROCESS, **common)
    assert beam.inputs == one.inputs and beam.inputs[0]["documents"] == 6
    assert manifest_fingerprint(beam) == manifest_fingerprint(one)
