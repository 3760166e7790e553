"""`prepare --spm_model` and `--init_from` accept an HF directory whatever its tokenizer files
(issue 32, friction 8): spiece.model, or a tokenizer.json holding a Unigram model, converted
and checked; anything else is refused in one line that says how to get a spiece.model."""

import json
import shutil

import pytest
import sentencepiece as spm
from etils import epath

from tests import multilingual
from tests.test_data_common import english_text, scratch, small_corpus
from xlnet_jax import cli, paths
from xlnet_jax.checkpoint import hf_tokenizer
from xlnet_jax.data import spm_source
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.data.normalize import normalize
from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.errors import DataError


@pytest.fixture(autouse=True)
def private_cache(monkeypatch, tmp_path):
    """Converted models are cached per host: each test converts afresh."""
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))


def export_files(out, manifest) -> epath.Path:
    """An HF directory's tokenizer files as `export-hf` writes them (spiece.model too)."""
    out = epath.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(manifest.tokenizer_path, out / spm_source.SPIECE_FILE)
    hf_tokenizer.write_tokenizer_files(
        out, manifest.tokenizer_path, keep_accents=manifest.keep_accents, uncased=manifest.uncased
    )
    return out


def saved_by_transformers(tmp_path) -> epath.Path:
    """What transformers 5.x's save_pretrained writes for our tokenizer: no spiece.model."""
    from transformers import XLNetTokenizer

    exported = export_files(tmp_path / "export", load_manifest(small_corpus()))
    saved = tmp_path / "saved"
    XLNetTokenizer.from_pretrained(exported).save_pretrained(saved)
    assert not (saved / spm_source.SPIECE_FILE).exists()
    assert (saved / spm_source.JSON_FILE).exists()
    return epath.Path(saved)


def encode_lines(model: str, path: str) -> list[list[int]]:
    sp = spm.SentencePieceProcessor(model_file=model)
    lines = [line for line in open(path, encoding="utf-8").read().splitlines() if line]
    return sp.encode([normalize(line, uncased=False) for line in lines])


def test_a_save_pretrained_directory_gives_the_corpus_tokenizer_back(tmp_path):
    original = load_manifest(small_corpus()).tokenizer_path
    saved = saved_by_transformers(tmp_path)
    converted = spm_source.resolve_spm_model(str(saved))
    assert spm_source.spm_fingerprint(converted) == spm_source.spm_fingerprint(original)
    assert encode_lines(converted, english_text()) == encode_lines(original, english_text())
    # prepare --spm_model DIR: the corpus tokenizes as one prepared with the original.
    options = dict(validation_fraction=0.1, num_workers=1)  # small_corpus()'s
    corpus = prepare_corpus([english_text()], scratch("hf-dir"), spm_model=converted, **options)
    assert corpus.splits == load_manifest(small_corpus()).splits
    assert spm_source.spm_fingerprint(corpus.tokenizer_path) == spm_source.spm_fingerprint(original)
    # The command line takes the directory itself.
    out = scratch("cli")
    options = ["--validation_fraction", "0.1", "--num_workers", "1"]
    assert (
        cli.main(["prepare", "--out", out, "--spm_model", str(saved), *options, english_text()])
        == 0
    )
    assert load_manifest(out).splits == corpus.splits
    # A directory with spiece.model is read as it is.
    exported = tmp_path / "export"
    assert spm_source.resolve_spm_model(str(exported)) == str(exported / "spiece.model")


def test_hangul_pieces_spelled_in_jamo_come_back_whole(tmp_path):
    """Our tokenizer.json spells Hangul syllables in jamo (hf_tokenizer.py); converted back,
    the model is the corpus's own."""
    text = multilingual.text_file("ko-zh", ("ko", "zh", "en"), 40)
    corpus = scratch("ko-zh")
    manifest = prepare_corpus([text], corpus, vocab_size=150, num_workers=1)
    exported = export_files(tmp_path / "export", manifest)
    (exported / spm_source.SPIECE_FILE).unlink()
    converted = spm_source.resolve_spm_model(str(exported))
    assert spm_source.spm_fingerprint(converted) == spm_source.spm_fingerprint(
        manifest.tokenizer_path
    )
    assert encode_lines(converted, text) == encode_lines(manifest.tokenizer_path, text)


def test_a_conversion_that_tokenizes_otherwise_is_refused(tmp_path):
    saved = saved_by_transformers(tmp_path)
    spec = json.loads((saved / spm_source.JSON_FILE).read_text())
    spec["normalizer"]["normalizers"].append({"type": "Lowercase"})  # cased config, cased vocab
    (saved / spm_source.JSON_FILE).write_text(json.dumps(spec))
    with pytest.raises(DataError, match=r"tokenizes .* otherwise than tokenizer.json does; copy"):
        spm_source.resolve_spm_model(str(saved))


def test_other_tokenizer_files_are_refused_with_the_way_to_a_spiece_model(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    (tmp_path / "bpe").mkdir()
    (tmp_path / "bpe" / "tokenizer.json").write_text(Tokenizer(BPE()).to_str())
    with pytest.raises(DataError) as info:
        spm_source.resolve_spm_model(str(tmp_path / "bpe"))
    assert "its model is BPE, not a SentencePiece unigram model; copy spiece.model" in str(
        info.value
    )
    assert "save_vocabulary(DIR)" in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"holds neither spiece.model nor tokenizer.json; copy"):
        spm_source.resolve_spm_model(str(tmp_path / "empty"))
    assert spm_source.resolve_spm_model("some.model") == "some.model"  # a file: prepare checks
