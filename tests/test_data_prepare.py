"""Corpus preparation: tokenizer, tfds dataset, splits, manifest and fingerprint."""

import hashlib
import json
import os
import shutil

import numpy as np
import tensorflow_datasets as tfds
from test_data_common import english_text, scratch, small_corpus, write_documents

from xlnet_jax.data import document_keys, manifest, tfds_builder
from xlnet_jax.data.normalize import normalize
from xlnet_jax.data.prepare import load_manifest, manifest_fingerprint, prepare_corpus
from xlnet_jax.data.tokenizer import SPECIAL_PIECES, load_processor


def input_documents(path: str) -> list[list[str]]:
    with open(path, encoding="utf-8") as f:
        return [doc.splitlines() for doc in f.read().strip().split("\n\n")]


def test_manifest_records_tokenizer_inputs_and_splits():
    m = load_manifest(small_corpus())
    sp = load_processor(m.tokenizer_path)
    assert m.vocab_size == sp.get_piece_size() == 500
    assert [sp.id_to_piece(i) for i in range(9)] == list(SPECIAL_PIECES)
    assert m.special_ids == {piece: i for i, piece in enumerate(SPECIAL_PIECES)}
    with open(m.tokenizer_path, "rb") as f:
        assert m.tokenizer == {
            "file": "spm.model",
            "sha256": hashlib.sha256(f.read()).hexdigest(),
            "trained": True,
        }
    with open(english_text(), "rb") as f:
        data = f.read()
    (record,) = m.inputs
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["bytes"] == len(data)
    assert record["documents"] == len(input_documents(english_text()))
    assert m.splits["train"]["documents"] + m.splits["validation"]["documents"] == 57
    assert m.normalization["lowercase"] is False
    assert m.stats["tokens_per_second"] > 0
    with open(os.path.join(small_corpus(), "manifest.json")) as f:
        assert json.load(f)["format_version"] == m.format_version == manifest.FORMAT_VERSION == 3


def test_splits_hold_whole_tokenized_documents_in_corpus_order():
    """Every input document is in exactly one split, whole, with its sentence lengths."""
    m = load_manifest(small_corpus())
    sp = load_processor(m.tokenizer_path)
    expected = []
    for doc in input_documents(english_text()):
        pieces = [ids for ids in sp.encode([normalize(s, uncased=False) for s in doc]) if ids]
        expected.append(([t for ids in pieces for t in ids], [len(ids) for ids in pieces]))
    found = {}
    for split in ("train", "validation"):
        docs = list(tfds_builder.read_documents(small_corpus(), split))
        assert sum(len(tokens) + 1 for tokens, _ in docs) == m.splits[split]["tokens"]
        found[split] = [(tokens.tolist(), lengths.tolist()) for tokens, lengths in docs]
    train_positions = [expected.index(doc) for doc in found["train"]]
    assert train_positions == sorted(train_positions)
    assert sorted(found["train"] + found["validation"]) == sorted(expected)


def test_dataset_is_a_plain_tfds_array_record_dataset():
    builder = tfds.builder_from_directory(tfds_builder.dataset_dir(small_corpus()))
    assert set(builder.info.splits.keys()) == {"train", "validation"}
    example = builder.as_data_source(split="validation")[0]
    assert example["tokens"].dtype == np.int32
    assert example["sentence_lengths"].sum() == len(example["tokens"])


def test_two_workers_write_the_same_corpus():
    out = scratch("workers")
    prepare_corpus([english_text()], out, vocab_size=500, validation_fraction=0.1, num_workers=2)
    assert manifest_fingerprint(load_manifest(out)) == manifest_fingerprint(
        load_manifest(small_corpus())
    )


def test_a_given_model_is_used_even_from_the_corpus_it_replaces():
    out = scratch("given")
    shutil.copytree(small_corpus(), out, dirs_exist_ok=True)
    m = prepare_corpus(
        [english_text()], out, spm_model=os.path.join(out, "spm.model"), validation_fraction=0.1
    )
    assert m.tokenizer["trained"] is False
    assert m.tokenizer["sha256"] == load_manifest(small_corpus()).tokenizer["sha256"]
    assert m.splits == load_manifest(small_corpus()).splits


def test_fingerprint_follows_input_content_not_its_path():
    model = load_manifest(small_corpus()).tokenizer_path
    docs = [["The first document.", "Its second line."], ["Another document here."]] * 5
    path = write_documents(os.path.join(scratch("fp"), "a.txt"), docs)
    moved = shutil.copy(path, os.path.join(scratch("fp"), "b.txt"))

    def fingerprint(text_file):
        return manifest_fingerprint(
            prepare_corpus([text_file], scratch("fp"), spm_model=model, num_workers=1)
        )

    original = fingerprint(path)
    assert fingerprint(moved) == original
    with open(path, "a") as f:
        f.write("\nOne more sentence.\n")
    assert fingerprint(path) != original


def test_uncased_lowercases_before_tokenizing():
    model = load_manifest(small_corpus()).tokenizer_path
    path = write_documents(os.path.join(scratch("uncased"), "a.txt"), [["Hello World."]] * 4)
    out = scratch("uncased")
    m = prepare_corpus([path], out, spm_model=model, uncased=True, validation_fraction=0)
    assert m.normalization["lowercase"] is True and list(m.splits) == ["train"]
    (tokens, _), *_ = tfds_builder.read_documents(out, "train")
    assert load_processor(model).decode(tokens.tolist()) == "hello world."


def test_normalize_matches_the_original_preprocessing():
    assert normalize("  a\t b \n c ", uncased=False) == "a b c"
    assert normalize("``quoted''", uncased=False) == '"quoted"'
    assert normalize("Café naïve Ångström", uncased=False) == "Cafe naive Angstrom"
    assert normalize("Ünïcode", uncased=True) == "unicode"
    assert normalize(" \t ", uncased=False) == ""


def test_progress_and_a_closing_line_with_tokens_per_second(capsys):
    model = load_manifest(small_corpus()).tokenizer_path
    path = write_documents(os.path.join(scratch("progress"), "a.txt"), [["Some text."]] * 3)
    prepare_corpus([path], scratch("progress"), spm_model=model, num_workers=1)
    err = capsys.readouterr().err
    assert "Tokenizing: 3/3 docs" in err
    assert "tokens/s" in err.splitlines()[-1]


class TinyTextDocs(tfds.core.GeneratorBasedBuilder):
    """A local tfds text dataset, as a user would have prepared one."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        features = tfds.features.FeaturesDict({"body": tfds.features.Text(), "id": np.int32})
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(6):
            yield i, {"body": f"Document number {i}.\nIt has two lines.", "id": i}


def test_a_local_tfds_text_dataset_is_an_input():
    data_dir = scratch("tfds")
    tfds.disable_progress_bar()
    TinyTextDocs(data_dir=data_dir, file_format="array_record").download_and_prepare()
    model = load_manifest(small_corpus()).tokenizer_path
    m = prepare_corpus(
        [],
        scratch("tfds-corpus"),
        spm_model=model,
        tfds_name="tiny_text_docs",
        tfds_text_feature="body",
        tfds_data_dir=data_dir,
        validation_fraction=0.2,
    )
    (record,) = m.inputs
    assert record["path"] == "tfds:tiny_text_docs/train[body]"
    assert (record["documents"], record["sentences"]) == (6, 12)
    assert m.splits["validation"]["documents"] == 1


def test_a_documents_split_is_its_own_not_a_draw_over_the_corpus():
    """Adding an input after the first leaves every document of the first in its split, in
    its order: the choice hashes (seed, input position, document index)."""
    model = load_manifest(small_corpus()).tokenizer_path
    extra = write_documents(
        os.path.join(scratch("more"), "more.txt"), [[f"Extra document {i}."] for i in range(40)]
    )
    common = dict(spm_model=model, validation_fraction=0.1, num_workers=1)
    alone = prepare_corpus([english_text()], scratch("alone"), **common)
    both = prepare_corpus([english_text(), extra], scratch("both"), **common)
    for split in ("train", "validation"):
        first = [t.tolist() for t, _ in tfds_builder.read_documents(alone.path, split)]
        found = [t.tolist() for t, _ in tfds_builder.read_documents(both.path, split)]
        assert found[: len(first)] == first, split
        assert len(found) > len(first), split


def test_the_tokenizer_sample_is_bounded_and_uniform():
    total, cap = 20_000, 2_000
    picked = [
        s for s in range(total) if document_keys.in_tokenizer_sample(s // 10, s % 10, total, cap)
    ]
    assert abs(len(picked) - cap) < 5 * cap**0.5  # binomial(total, cap / total)
    assert abs(np.mean(picked) - total / 2) < 0.05 * total


def test_a_corpus_prepared_before_format_2_still_loads():
    old = scratch("format-1")
    shutil.copytree(small_corpus(), old, dirs_exist_ok=True)
    with open(os.path.join(old, "manifest.json")) as f:
        fields = json.load(f)
    fields["format_version"] = 1
    with open(os.path.join(old, "manifest.json"), "w") as f:
        json.dump(fields, f)
    m = load_manifest(old)
    assert m.format_version == 1
    assert manifest_fingerprint(m) != manifest_fingerprint(load_manifest(small_corpus()))
    assert [t.tolist() for t, _ in tfds_builder.read_documents(old, "validation")] == [
        t.tolist() for t, _ in tfds_builder.read_documents(small_corpus(), "validation")
    ]


def test_full_width_punctuation_folds_to_ascii_on_every_path():
    """Issue 32, friction 9: NFKD folds ，（）！ to , ( ) !; with keep_accents the
    tokenizer's own NFKC (nmt_nfkc) folds them the same, so no prepare option keeps them."""
    text = "你好，世界（一）！"
    assert normalize(text, uncased=False) == "你好,世界(一)!"
    kept = normalize(text, uncased=False, keep_accents=True)
    assert kept == text
    sp = load_processor(load_manifest(small_corpus()).tokenizer_path)
    assert sp.encode(kept, out_type=str)[-5:] == sp.encode("你好,世界(一)!", out_type=str)[-5:]
    assert "，" not in "".join(sp.encode(kept, out_type=str))
