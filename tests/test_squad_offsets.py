"""Character offsets <-> SentencePiece pieces through our normalisation, on four scripts.

Paragraphs of English, accented Latin, Chinese and Korean words (tests/multilingual.py's
lists) with what normalisation changes mixed in: whitespace runs, tabs and newlines,
decomposed accents, full-width letters, LaTeX quotes, ligatures. Each gold answer is mapped to
the pieces covering it and cut back out of the original paragraph by the pieces' offsets.
"""

import unicodedata

import numpy as np
import pytest

from tests import multilingual
from xlnet_jax.data import normalize, tokenizer
from xlnet_jax.finetune.squad import offsets

ANSWERS_PER_SCRIPT = 100
VARIANTS = [dict(uncased=False), dict(uncased=True), dict(uncased=False, keep_accents=True)]


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    """A 400-piece unigram model trained on the four scripts, as prepare trains one."""
    docs = multilingual.documents(("en", "latin", "zh", "ko"), 200)
    sentences = [normalize.normalize(s, uncased=False) for doc in docs for s in doc]
    path = str(tmp_path_factory.mktemp("spm") / "spiece.model")
    tokenizer.train_tokenizer(sentences, path, 400)
    return tokenizer.load_processor(path)


def _disguise(word: str, rng: np.random.Generator, quotes: bool) -> str:
    """The word as a messy source might write it: what normalisation has to undo."""
    roll = rng.random()
    if roll < 0.15:
        return unicodedata.normalize("NFD", word)  # combining accents, Hangul jamo
    if roll < 0.25 and word.isascii():
        return "".join(chr(ord(c) + 0xFEE0) if c.isalpha() else c for c in word)  # full width
    if roll < 0.3 and quotes:
        return f"``{word}''"
    if roll < 0.35 and "fi" in word:
        return word.replace("fi", "\ufb01")
    return word


def _paragraph(lang: str, rng: np.random.Generator) -> tuple[str, int, str]:
    """(paragraph, answer_start, answer): 20 words, the answer a run of 1 to 3 of them.

    Spaced scripts join words with random whitespace runs; Chinese joins them directly and
    ends the answer's clause with punctuation, so the answer is bounded as a reader sees it
    (without LaTeX quotes there: SentencePiece joins '，' and '"' into one piece).
    """
    words = [_disguise(w, rng, lang != "zh") for w in rng.choice(multilingual.WORDS[lang], 20)]
    first, count = int(rng.integers(1, 16)), int(rng.integers(1, 4))
    if lang == "zh":
        gaps = [""] * 19
        gaps[first - 1], gaps[first + count - 1] = "，", "。"
    else:
        gaps = [rng.choice([" ", " ", " ", "  ", "\t", " \n "]) for _ in range(19)]
    text, start, end = words[0], 0, 0
    for i, (gap, word) in enumerate(zip(gaps, words[1:], strict=True), start=1):
        text += gap
        start = len(text) if i == first else start
        text += word
        end = len(text) if i == first + count - 1 else end
    answer = text[start:end]
    assert text[start : start + len(answer)] == answer
    return text, start, answer


@pytest.mark.parametrize("lang", ["en", "latin", "zh", "ko"])
@pytest.mark.parametrize("variant", VARIANTS, ids=["cased", "uncased", "keep_accents"])
def test_every_gold_answer_maps_back_to_its_own_text(sp, lang, variant):
    rng = np.random.default_rng(len(lang))
    wrong = []
    for _ in range(ANSWERS_PER_SCRIPT):
        text, start, answer = _paragraph(lang, rng)
        pieces = offsets.tokenize(sp, text, **variant)
        np.testing.assert_array_equal(
            pieces.ids, sp.encode(normalize.normalize(text, **variant))
        )  # the same pieces pretraining's encoder makes
        first, last = pieces.covering(start, start + len(answer))
        if text[pieces.start[first] : pieces.end[last]] != answer:
            wrong.append((answer, text[pieces.start[first] : pieces.end[last]]))
    assert not wrong, wrong[:5]


def test_pieces_cut_from_the_original_normalise_to_what_the_model_reads(sp):
    """Every piece's original characters, normalised, are the piece's own text: the
    mapping is exact piece by piece, not only at answer boundaries."""
    rng = np.random.default_rng(5)
    for lang in ("en", "latin", "zh", "ko"):
        for _ in range(20):
            text, _, _ = _paragraph(lang, rng)
            pieces = offsets.tokenize(sp, text, uncased=False)
            for piece_id, s, e in zip(pieces.ids, pieces.start, pieces.end, strict=True):
                surface = sp.id_to_piece(int(piece_id)).lstrip("\u2581")
                if piece_id == sp.unk_id() or not surface:
                    continue
                cut = normalize.normalize(text[s:e], uncased=False)
                assert unicodedata.normalize("NFKC", cut) == surface, (text[s:e], surface)


def test_inside_a_piece_answers_map_to_the_smallest_cover(sp):
    """A Chinese answer that starts or ends inside a piece maps to the fewest whole pieces
    holding it: the model can only point at pieces (the original's behaviour too)."""
    rng = np.random.default_rng(9)
    inside = 0
    for _ in range(50):
        words = list(rng.choice(multilingual.WORDS["zh"], 12))
        text = "".join(words)
        start = len("".join(words[:4]))
        answer = "".join(words[4:6])
        pieces = offsets.tokenize(sp, text, uncased=False)
        first, last = pieces.covering(start, start + len(answer))
        cut = text[pieces.start[first] : pieces.end[last]]
        assert answer in cut
        inside += cut != answer
        assert pieces.start[first] <= start < pieces.end[first]
        assert pieces.start[last] < start + len(answer) <= pieces.end[last]
    print(f"\n{inside} of 50 Chinese word answers start or end inside a piece")
    assert inside < 50


def test_spans_follow_each_normalisation_step():
    text = "  Ｃafe\u0301\t\t``ﬁne''  \x00ΣΑΣ İ"
    for variant in VARIANTS:
        normalized, start, end = offsets.normalize_with_spans(text, **variant)
        assert normalized == normalize.normalize(text, **variant)
        assert len(start) == len(end) == len(normalized)
        assert (start < end).all() and (np.diff(start) >= 0).all()
    normalized, start, end = offsets.normalize_with_spans(text, uncased=False)
    assert [text[s:e] for s, e in zip(start, end, strict=True)][:6] == [
        "Ｃ",
        "a",
        "f",
        "e\u0301",
        "\t",
        "``",
    ]
