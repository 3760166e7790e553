"""Korean, Chinese, Japanese and accented text (issue 26): normalisation with and without
--keep_accents, the Han/kana word-start rule, the accent-loss hint, HF tokenizer agreement,
and a short run on mixed Korean/Chinese/English text that learns. Text: tests/multilingual.py.
"""

import dataclasses
import json
import shutil
import subprocess
import sys
import unicodedata

import jax
import numpy as np
import pytest

from tests import multilingual, test_data_common
from tests.train_harness import environment
from xlnet_jax.checkpoint import hf, hf_tokenizer
from xlnet_jax.checkpoint.export import export_to_hf
from xlnet_jax.data import spm_source, tokenizer, word_starts
from xlnet_jax.data.corpus import unigram_entropy
from xlnet_jax.data.manifest import load_manifest, manifest_fingerprint
from xlnet_jax.data.normalize import normalize
from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.data.streams import StreamBatcher
from xlnet_jax.errors import DataError
from xlnet_jax.objective.plm import PLMConfig, sample_plm
from xlnet_jax.run.init_from import Source, check_source, load_source

ALL = ("ko", "zh", "ja", "latin", "en")
MODES = {"default": False, "keep_accents": True}


def prepare(name: str, langs: tuple[str, ...], docs: int, vocab: int, keep: bool, capsys=None):
    """(corpus dir, its raw text file, prepare's stderr) for documents of `langs`."""
    text = multilingual.text_file(name, langs, docs)
    out = f"{test_data_common.scratch(name)}/corpus"
    if capsys is not None:
        capsys.readouterr()
    prepare_corpus([text], out, vocab_size=vocab, num_workers=1, keep_accents=keep)
    return out, text, capsys.readouterr().err if capsys is not None else ""


@pytest.fixture(scope="module", params=list(MODES))
def mixed(request):
    """The five languages prepared in one mode: (mode's keep_accents, corpus, raw lines)."""
    keep = MODES[request.param]
    out, text, _ = prepare(f"mixed-{request.param}", ALL, 150, 600, keep)
    with open(text, encoding="utf-8") as f:
        return keep, out, [line.rstrip("\n") for line in f if line.strip()]


def test_round_trip_keeps_accents_and_hangul_on_request(mixed):
    keep, corpus, lines = mixed
    sp = tokenizer.load_processor(load_manifest(corpus).tokenizer_path)
    kept = [
        sp.decode(sp.encode(normalize(line, uncased=False, keep_accents=keep)))
        == unicodedata.normalize("NFKC", line)
        for line in lines
    ]
    accented = [ok for ok, line in zip(kept, lines, strict=True) if not line.isascii()]
    if keep:
        assert sum(kept) / len(kept) >= 0.999, kept.count(False)
    else:  # accents go; Hangul, Han and kana without marks come back whole
        assert not all(accented)
    korean = [ok for ok, line in zip(kept, lines, strict=True) if "다" in line or "은" in line]
    assert korean and all(korean)


def test_korean_vocabulary_stays_composed_in_both_modes(mixed):
    keep, corpus, _ = mixed
    sp = tokenizer.load_processor(load_manifest(corpus).tokenizer_path)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    syllables = [p for p in pieces if any("\uac00" <= c <= "\ud7a3" for c in p)]
    jamo = [p for p in pieces if any("\u1100" <= c <= "\u11ff" for c in p)]
    assert len(syllables) > 50 and jamo == []
    manifest = load_manifest(corpus)
    assert manifest.normalization["nfkd_strip_accents"] is (not keep)
    assert manifest.word_starts == word_starts.MARKER_HAN_KANA


def test_word_start_rule():
    rule = word_starts.MARKER_HAN_KANA
    for piece in (
        "中",
        "▁中文",
        "文本",
        "テキスト",
        "は",
        "▁日本",
        "▁데비안",
        "▁the",
        ",",
        "<sep>",
    ):
        assert word_starts.is_word_start(piece, rule), piece
    # Korean is written with spaces: its inner pieces continue a word. Small kana, the long
    # vowel mark and Latin pieces without '▁' continue too.
    for piece in ("안은", "ing", "ゃ", "ッ", "ー", "é"):
        assert not word_starts.is_word_start(piece, rule), piece
    assert not word_starts.is_word_start("中", word_starts.MARKER)


def test_english_word_starts_are_as_before():
    manifest = load_manifest(test_data_common.small_corpus())
    sp = tokenizer.load_processor(manifest.tokenizer_path)
    new, _ = tokenizer.piece_tables(sp, word_starts.MARKER_HAN_KANA)
    old, _ = tokenizer.piece_tables(sp, word_starts.MARKER)
    np.testing.assert_array_equal(new, old)
    # The fields a default corpus had before keep the values (and the fingerprint) they had.
    assert manifest.normalization == {
        "collapse_whitespace": True,
        "control_chars_to_space": True,
        "latex_quotes_to_double_quote": True,
        "nfkd_strip_accents": True,
        "lowercase": False,
    }
    # English corpora record the rule in effect, "marker": their fingerprint is as before.
    assert manifest.word_starts == word_starts.MARKER
    legacy = json.loads(open(f"{manifest.path}/manifest.json").read())
    assert legacy.pop("word_starts") == word_starts.MARKER
    assert manifest_fingerprint(manifest) == manifest_fingerprint(
        type(manifest)(path=manifest.path, **legacy)
    )


def test_a_corpus_prepared_before_the_rule_keeps_the_marker_rule(mixed, tmp_path):
    _, corpus, _ = mixed
    fields = json.loads(open(f"{corpus}/manifest.json").read())
    assert fields.pop("word_starts") == word_starts.MARKER_HAN_KANA
    (tmp_path / "manifest.json").write_text(json.dumps(fields))
    before = load_manifest(str(tmp_path))
    assert before.word_starts == word_starts.MARKER
    # Prepared again, the corpus has the new rule and another fingerprint: a run started on
    # it before refuses to resume rather than change its objective underneath.
    assert manifest_fingerprint(before) != manifest_fingerprint(load_manifest(corpus))
    (tmp_path / "manifest.json").write_text(json.dumps({**fields, "word_starts": "bert"}))
    with pytest.raises(DataError, match="word_starts 'bert' is not one this version knows"):
        load_manifest(str(tmp_path))


def test_hint_for_dropped_accents_only(capsys):
    hints = {}
    for lang, vocab in {"latin": 55, "ko": 80, "en": 45, "zh": 200}.items():
        _, _, err = prepare(f"hint-{lang}", (lang,), 40, vocab, False, capsys)
        hints[lang] = [line for line in err.splitlines() if "--keep_accents" in line]
    assert len(hints["latin"]) == 1 and "% of this corpus's non-ASCII letters" in hints["latin"][0]
    assert hints["ko"] == hints["en"] == hints["zh"] == []
    _, _, err = prepare("hint-kept", ("latin",), 40, 70, True, capsys)
    assert "--keep_accents" not in err
    # English with a few accented names: a few letters of a large text, no hint.
    english = open(test_data_common.english_text(), encoding="utf-8").read()
    named = f"{test_data_common.scratch('named')}/named.txt"
    with open(named, "w", encoding="utf-8") as f:
        f.write(english + "\nThanks to José, Zoë and Günther.\n")
    capsys.readouterr()
    prepare_corpus([named], f"{test_data_common.scratch('named')}/c", vocab_size=500, num_workers=1)
    assert "--keep_accents" not in capsys.readouterr().err


def mean_masked_span_chars(corpus: str, rule: str) -> float:
    """Mean characters (the text of the pieces, '▁' not counted) per run of adjacent PLM
    targets, over 4 batches of 4 rows, with the word starts of `rule`. The objective is the
    paper's (configs/base.py): 512 tokens, 85 targets, mask_alpha 6, max_span 5 words."""
    cfg = PLMConfig(
        seq_len=512, reuse_len=256, num_predict=85, perm_size=256, mask_alpha=6, mask_beta=1,
        max_span=5,
    )  # fmt: skip
    batcher = StreamBatcher(corpus, "train", seq_len=512, reuse_len=256, global_batch=4,
                            bi_data=False, seed=0)  # fmt: skip
    sp = tokenizer.load_processor(batcher.manifest.tokenizer_path)
    chars = np.array([len(sp.id_to_piece(i).replace("\u2581", "")) for i in range(len(sp))])
    starts, _ = tokenizer.piece_tables(sp, rule)
    spans = []
    for step in range(4):
        batch = batcher.batch(step)
        sample = sample_plm(
            jax.random.key(step), batch["input_ids"], starts[batch["input_ids"]],
            batch["is_functional"], batch["is_backward"], cfg,
        )  # fmt: skip
        for ids, target in zip(batch["input_ids"], np.asarray(sample.is_target), strict=True):
            edges = np.diff(np.concatenate([[0], target.astype(int), [0]]))
            runs = zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True)
            for begin, end in runs:
                spans.append(chars[ids[begin:end]].sum())
    return float(np.mean(spans))


@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_masked_spans_on_chinese_and_japanese_rows_are_short(lang):
    corpus, _, _ = prepare(f"spans-{lang}", (lang,), 120, 600, True)
    new = mean_masked_span_chars(corpus, word_starts.MARKER_HAN_KANA)
    old = mean_masked_span_chars(corpus, word_starts.MARKER)
    assert new < 8 and old > new, (new, old)


def test_hf_tokenizers_give_our_ids_in_both_modes(mixed, tmp_path):
    from transformers import AutoTokenizer, XLNetTokenizer

    keep, corpus, lines = mixed
    manifest = load_manifest(corpus)
    sp = tokenizer.load_processor(manifest.tokenizer_path)
    shutil.copy(manifest.tokenizer_path, tmp_path / "spiece.model")
    note = hf_tokenizer.write_tokenizer_files(
        tmp_path, manifest.tokenizer_path, keep_accents=keep, uncased=False
    )
    loaders = [AutoTokenizer] if keep else [AutoTokenizer, XLNetTokenizer]
    assert ("XLNetTokenizer (5.23) drops accents" in note) is keep
    ours = [sp.encode(normalize(line, uncased=False, keep_accents=keep)) for line in lines]
    for loader in loaders:
        hf = loader.from_pretrained(tmp_path)
        theirs = hf(lines, add_special_tokens=False)["input_ids"]
        differ = [line for line, a, b in zip(lines, ours, theirs, strict=True) if a != b]
        assert differ == [], (loader.__name__, differ[:3])
    # So their <unk> rate on Korean is ours: none, every syllable is in the vocabulary.
    korean = [ids for ids, line in zip(ours, lines, strict=True) if "다" in line]
    assert korean and sum(ids.count(tokenizer.SPECIAL_IDS["<unk>"]) for ids in korean) == 0
    assert spm_source.read_settings(tmp_path) == {"keep_accents": keep, "uncased": False}


def test_hf_tokenizers_give_our_ids_on_an_uncased_corpus(tmp_path):
    from transformers import AutoTokenizer, XLNetTokenizer

    text = multilingual.text_file("uncased", ("ko", "latin", "en"), 60)
    corpus = f"{test_data_common.scratch('uncased')}/corpus"
    prepare_corpus([text], corpus, vocab_size=120, num_workers=1, uncased=True)
    manifest = load_manifest(corpus)
    shutil.copy(manifest.tokenizer_path, tmp_path / "spiece.model")
    hf_tokenizer.write_tokenizer_files(
        tmp_path, manifest.tokenizer_path, keep_accents=False, uncased=True
    )
    sp = tokenizer.load_processor(manifest.tokenizer_path)
    lines = [line.upper() for line in open(text, encoding="utf-8").read().split("\n") if line]
    ours = [sp.encode(normalize(line, uncased=True)) for line in lines]
    for loader in (AutoTokenizer, XLNetTokenizer):
        theirs = loader.from_pretrained(tmp_path)(lines, add_special_tokens=False)["input_ids"]
        assert theirs == ours, loader.__name__


def test_a_source_normalised_otherwise_is_refused_in_one_line(mixed, tmp_path):
    keep, corpus, _ = mixed
    manifest = load_manifest(corpus)
    config = {"vocab_size": manifest.vocab_size}
    other = {"keep_accents": not keep, "uncased": False}
    source = Source("src", "params directory", None, {}, manifest.tokenizer_path, other)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("xlnet_jax.run.init_from.ARCHITECTURE_FIELDS", ())
        with pytest.raises(DataError, match=r"^--init_from src: its text was normalised with"):
            check_source(source, config, manifest)
        same = dataclasses.replace(source, normalization={**other, "keep_accents": keep})
        check_source(same, config, manifest)


VOCAB = 400
OVERRIDES = [
    f"--config.vocab_size={VOCAB}", "--config.d_model=64", "--config.n_head=2",
    "--config.d_head=32", "--config.d_inner=128", "--config.seq_len=32",
    "--config.reuse_len=16", "--config.mem_len=16", "--config.perm_size=16",
    "--config.num_predict=10", "--config.num_train_steps=200", "--config.warmup_steps=10",
    "--config.learning_rate=5e-3", "--config.eval_every=200", "--config.checkpoint_every=200",
    "--config.log_every=50", "--config.eval_steps=4",
]  # fmt: skip


def test_a_short_run_on_korean_chinese_english_learns_and_exports(tmp_path):
    text = multilingual.text_file("mixed-run", ("ko", "zh", "en"), 300)
    corpus = str(tmp_path / "corpus")
    prepare_corpus([text], corpus, vocab_size=VOCAB, validation_fraction=0.1, num_workers=1)
    workdir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.cli", "train", "--config", "configs/tiny.py",
         "--workdir", str(workdir), f"--config.corpus_dir={corpus}", *OVERRIDES],
        capture_output=True, text=True, env=environment(), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    heldout = [row["loss"] for row in rows if row["kind"] == "eval"][-1]
    entropy = unigram_entropy(load_manifest(corpus), VOCAB)
    assert heldout < entropy, (heldout, entropy)

    note = export_to_hf(str(workdir), str(tmp_path / "hf"))
    assert "XLNetTokenizer and AutoTokenizer give this corpus's ids" in note
    # import-hf carries the settings; --init_from reads them back from either directory.
    hf.import_hf(tmp_path / "hf", tmp_path / "params")
    for directory in ("hf", "params"):
        source = load_source(str(tmp_path / directory))
        assert source.normalization == {"keep_accents": False, "uncased": False}
