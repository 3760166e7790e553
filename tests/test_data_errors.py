"""Bad input: each case is a DataError naming the file and what to do, or a counted skip."""

import hashlib
import io
import logging
import os
import re

import pytest
import sentencepiece as spm
from test_data_common import english_text, scratch, small_corpus, write_documents

from xlnet_jax.data import sources
from xlnet_jax.data.normalize import normalize
from xlnet_jax.data.prepare import load_manifest, manifest_fingerprint, prepare_corpus
from xlnet_jax.data.streams import StreamBatcher
from xlnet_jax.errors import DataError

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
    # Named with a trailing slash, as shells complete it: the glob has one slash.
    with pytest.raises(DataError, match=re.escape(f"a glob like '{directory}/*.txt'.")):
        prepare_corpus([directory + "/"], scratch("out"), spm_model=model())


def test_only_empty_files_are_refused():
    empty = os.path.join(scratch("empty"), "empty.txt")
    open(empty, "w").close()
    with pytest.raises(DataError, match="Every input is empty; pass files that hold text"):
        prepare_corpus([empty], scratch("out"), spm_model=model())


def damaged_directory() -> str:
    """A real directory's kinds of damage, one file each, beside plain text with CRLFs."""
    directory = scratch("damaged")
    text = "\r\n\r\n".join(f"Sentence {i}.\r\nAnd one more." for i in range(20)) + "\r\n"
    files = {
        "part-00-text.txt": text.encode(),
        "part-01-control.txt": b"A NUL\x00here.\nAn ESC\x1b[0m there.\n\nClean words.\n",
        "part-02-long.txt": b"Before the blob.\n" + b"QUJD" * 250_000 + b"\nAfter the blob.\n",
        "part-99-empty.txt": b"",
    }
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    return directory


def test_a_directory_with_damaged_and_empty_files_prepares_and_reports_each(caplog):
    """Issue 18: an empty file, a NUL, an ESC and a 1 MB base64 line no longer stop prepare
    or slip through: each is skipped or cleaned, warned about, and counted in the manifest."""
    directory = damaged_directory()
    with caplog.at_level(logging.WARNING):
        m = prepare_corpus(
            [os.path.join(directory, "*.txt")], scratch("out"), spm_model=model(), num_workers=1
        )
    records = {os.path.basename(r["path"]): r for r in m.inputs}
    text, control, long, empty = (records[name] for name in sorted(records))
    assert text["documents"] == 20 and text["control_char_lines"] == text["long_lines"] == 0
    assert control["control_char_lines"] == 2 and control["first_control_char_offset"] == 0
    assert control["sentences"] == 3
    assert long["long_lines"] == 1 and long["first_long_line_offset"] == len(b"Before the blob.\n")
    assert long["sentences"] == 2 and long["bytes"] == 1_000_034
    assert empty == {
        "path": os.path.join(directory, "part-99-empty.txt"),
        "bytes": 0,
        "sha256": hashlib.sha256(b"").hexdigest(),
        "invalid_utf8_lines": 0,
        "control_char_lines": 0,
        "long_lines": 0,
        "documents": 0,
        "sentences": 0,
        "skipped": "empty",
    }
    assert m.splits["train"]["tokens"] + m.splits.get("validation", {}).get("tokens", 0) < 1000
    assert "part-99-empty.txt is empty; skipped." in caplog.text
    assert (
        "2 line(s) hold control characters (NUL, ESC...), turned into spaces, the first at "
        "byte 0." in caplog.text
    )
    assert "skipped 1 line(s) longer than 65,536 bytes, the first at byte 17." in caplog.text
    # The empty file changes no token: the corpus is the same without it.
    os.remove(os.path.join(directory, "part-99-empty.txt"))
    again = prepare_corpus(
        [os.path.join(directory, "*.txt")], scratch("out"), spm_model=model(), num_workers=1
    )
    assert manifest_fingerprint(again) == manifest_fingerprint(m)


def test_control_characters_become_spaces_not_unknown_pieces():
    sp = spm.SentencePieceProcessor(model_file=model())
    cleaned = normalize("A NUL\x00here, a DEL\x7fthere.", uncased=False)
    assert cleaned == "A NUL here, a DEL there."
    assert sp.unk_id() not in sp.encode(cleaned)


def test_the_line_limit_counts_the_newline_and_reads_past_the_rest(tmp_path):
    limit = sources.MAX_LINE_BYTES
    path = tmp_path / "edge.txt"
    fits, over = b"a" * (limit - 1) + b"\n", b"b" * limit + b"\n"
    path.write_bytes(b"Start.\n" + fits + over + b"c" * (3 * limit) + b"\nEnd.\n")
    source = sources.TextFile(str(path))
    (doc,) = list(source.documents())
    assert [len(line) for line in doc] == [6, limit - 1, 4]
    assert source.record["long_lines"] == 2
    assert source.record["first_long_line_offset"] == 7 + len(fits)
    assert source.record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_blank_file_is_skipped_and_recorded_but_a_corpus_of_blanks_is_refused(caplog):
    blank = write_documents(os.path.join(scratch("blank"), "blank.txt"), [[" \t "], [""]])
    m = prepare_corpus([text_file(), blank], scratch("out"), spm_model=model())
    (record,) = [r for r in m.inputs if r["path"] == blank]
    assert record["skipped"] == "no text" and record["bytes"] > 0 and record["documents"] == 0
    assert f"{blank} holds only blank lines; skipped." in caplog.text
    with pytest.raises(DataError, match="Every input is empty"):
        prepare_corpus([blank], scratch("out2"), spm_model=model())


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
    """(The bi_data rows-per-shard rule is a config check: tests/test_config_validation.py.)"""
    with pytest.raises(DataError, match=r"seq_len \(20\) must exceed reuse_len \(16\)"):
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
