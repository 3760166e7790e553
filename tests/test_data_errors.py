"""Bad input: each case is a DataError naming the file and what to do, or a counted skip."""

import io
import logging
import os

import pytest
import sentencepiece as spm
from test_data_common import english_text, scratch, small_corpus, write_documents

from xlnet_jax.data.errors import DataError
from xlnet_jax.data.prepare import load_manifest, prepare_corpus
from xlnet_jax.data.streams import StreamBatcher

DOCS = [["A first sentence here.", "And a second one."], ["Another document."]] * 20


def model() -> str:
    return load_manifest(small_corpus()).tokenizer_path


def text_file(name="a.txt", docs=DOCS) -> str:
    return write_documents(os.path.join(scratch("input"), name), docs)


def test_missing_path():
    missing = os.path.join(scratch("missing"), "nope.txt")
    with pytest.raises(DataError, match=f"Input {missing} does not exist"):
        prepare_corpus([missing], scratch("out"), spm_model=model())


def test_glob_matching_nothing():
    pattern = os.path.join(scratch("glob"), "*.txt")
    with pytest.raises(DataError, match="No file matches .*check the pattern"):
        prepare_corpus([pattern], scratch("out"), spm_model=model())


def test_directory_instead_of_files():
    directory = scratch("dir")
    with pytest.raises(DataError, match="is a directory; pass its files or a glob"):
        prepare_corpus([directory], scratch("out"), spm_model=model())


def test_empty_file():
    empty = os.path.join(scratch("empty"), "empty.txt")
    open(empty, "w").close()
    with pytest.raises(DataError, match=f"Input {empty} is empty; remove it"):
        prepare_corpus([text_file(), empty], scratch("out"), spm_model=model())


def test_whitespace_only_file():
    blank = write_documents(os.path.join(scratch("blank"), "blank.txt"), [[" \t "], [""]])
    with pytest.raises(DataError, match=f"Input {blank} holds no text"):
        prepare_corpus([text_file(), blank], scratch("out"), spm_model=model())


def test_a_few_invalid_utf8_lines_are_skipped_counted_and_logged(caplog):
    path = os.path.join(scratch("utf8"), "mixed.txt")
    good = "".join(f"Sentence number {i}.\n" + ("\n" if i % 3 == 2 else "") for i in range(30))
    with open(path, "wb") as f:
        f.write(good.encode() + b"Bad \xff byte.\n" + good.encode())
    with caplog.at_level(logging.WARNING):
        m = prepare_corpus([path], scratch("out"), spm_model=model(), num_workers=1)
    (record,) = m.inputs
    assert record["invalid_utf8_lines"] == 1
    assert record["first_invalid_utf8_offset"] == len(good.encode())
    assert (
        f"skipped 1 line(s) that are not valid UTF-8, the first at byte {len(good)}" in caplog.text
    )


def test_a_file_that_is_not_utf8_is_refused():
    path = os.path.join(scratch("latin1"), "latin1.txt")
    with open(path, "wb") as f:
        f.write("Café crème.\nÀ bientôt.\n\nDéjà vu.\n".encode("latin-1"))
    with pytest.raises(DataError, match=f"{path}: 3 of 4 lines are not valid UTF-8.*iconv"):
        prepare_corpus([path], scratch("out"), spm_model=model())


def test_corpus_too_small_for_one_step():
    with pytest.raises(
        DataError,
        match=r"'validation' split .* has [\d,]+ tokens, too few .*"
        r"1024 streams of at least reuse_len=64 .*need 65,536",
    ):
        StreamBatcher(
            small_corpus(),
            "validation",
            seq_len=128,
            reuse_len=64,
            global_batch=1024,
            bi_data=False,
            seed=0,
        )


def test_vocab_size_too_large_for_the_corpus():
    with pytest.raises(
        DataError, match=r"vocab_size 5000 is too large .* Pass a vocab_size <= \d+"
    ):
        prepare_corpus([text_file()], scratch("out"), vocab_size=5000)


def test_vocab_size_below_the_characters_needed():
    with pytest.raises(DataError, match=r"vocab_size 12 is smaller than the \d+ characters"):
        prepare_corpus([text_file()], scratch("out"), vocab_size=12)


def test_given_model_with_other_special_ids():
    plain = os.path.join(scratch("plain"), "plain.model")
    with open(english_text(), encoding="utf-8") as f, open(plain, "wb") as out:
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=(line.strip() for line in f if line.strip()),
            model_writer=writer,
            vocab_size=200,
            minloglevel=2,
        )
        out.write(writer.getvalue())
    with pytest.raises(
        DataError, match=f"{plain}: special pieces are not at XLNet's ids .*<cls> is absent"
    ):
        prepare_corpus([text_file()], scratch("out"), spm_model=plain)


def test_given_model_that_does_not_exist():
    with pytest.raises(DataError, match="SentencePiece model /nonexistent.model does not exist"):
        prepare_corpus([text_file()], scratch("out"), spm_model="/nonexistent.model")


def test_tfds_dataset_not_available_locally():
    data_dir = scratch("tfds-empty")
    with pytest.raises(DataError, match="'no_such_dataset_xyz' is not available in"):
        prepare_corpus(
            [],
            scratch("out"),
            spm_model=model(),
            tfds_name="no_such_dataset_xyz",
            tfds_data_dir=data_dir,
        )
    with pytest.raises(DataError, match="'mnist' is known but not prepared in .*nothing is down"):
        prepare_corpus(
            [], scratch("out"), spm_model=model(), tfds_name="mnist", tfds_data_dir=data_dir
        )


def test_out_dir_holding_other_files_is_left_alone():
    out = scratch("foreign")
    with open(os.path.join(out, "thesis.tex"), "w") as f:
        f.write("precious")
    with pytest.raises(DataError, match=f"{out} is not empty and not a prepared corpus"):
        prepare_corpus([text_file()], out, spm_model=model())
    assert os.listdir(out) == ["thesis.tex"]


def test_one_document_cannot_be_split():
    with pytest.raises(DataError, match="single document.*validation_fraction=0"):
        prepare_corpus([text_file(docs=[["Only one."]])], scratch("out"), spm_model=model())


def test_not_a_corpus_and_missing_split():
    not_corpus = scratch("nothing")
    with pytest.raises(
        DataError, match=f"{not_corpus} is not a prepared corpus.*xlnet-jax prepare"
    ):
        load_manifest(not_corpus)
    out = scratch("train-only")
    prepare_corpus([text_file()], out, spm_model=model(), validation_fraction=0, num_workers=1)
    with pytest.raises(DataError, match="no 'validation' split .*validation_fraction > 0"):
        StreamBatcher(
            out, "validation", seq_len=32, reuse_len=8, global_batch=2, bi_data=False, seed=0
        )


def test_bad_stream_layout_names_the_fields():
    with pytest.raises(
        DataError,
        match=r"seq_len \(20\) must exceed reuse_len \(16\).*"
        r"with bi_data, batch_size \(6\) must split into 2 data shards",
    ):
        StreamBatcher(
            small_corpus(),
            "train",
            seq_len=20,
            reuse_len=16,
            global_batch=6,
            bi_data=True,
            num_data_shards=2,
            seed=0,
        )
