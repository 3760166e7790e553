"""Which pieces begin a word: where a span of the PLM objective may start and end.

Two rules, recorded per corpus in manifest.json ("word_starts"):

  "marker" (the original's `_is_start_piece`): the piece begins with the word marker "▁",
    begins with "<" (the special pieces) or is a single ASCII punctuation character.
  "marker+han_kana" (corpora prepared since): the same, and also a piece whose first
    character after an optional "▁" is a Han ideograph, or a Hiragana or Katakana letter
    other than a small one (ゃ, ッ: they end a syllable). Chinese and Japanese are written
    without spaces, so under "marker" a "word" is a whole clause; here it is about one
    piece, BERT's convention for ideographs. Korean is written with spaces and keeps "▁";
    text without those scripts (English) gets exactly the "marker" table.

prepare records the rule in effect: "marker+han_kana" when the vocabulary holds a piece it
makes a word start, else "marker" (the same table). A corpus prepared before the rule
existed has no "word_starts" in its manifest and keeps "marker": a run resumed on it trains
on the objective it started with. One prepared again, whose rule changed, has another
fingerprint (manifest.manifest_fingerprint), so a run refuses to resume on it in one line.
"""

import unicodedata

MARKER = "marker"
MARKER_HAN_KANA = "marker+han_kana"
RULES = (MARKER, MARKER_HAN_KANA)

WORD_MARK = "\u2581"
# Single-character pieces the original counts as word starts (`_is_start_piece`).
_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
_KANA = ("HIRAGANA LETTER ", "KATAKANA LETTER ")
_HAN = ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH")


def begins_han_or_kana(piece: str) -> bool:
    """Whether the piece's first character after an optional '▁' is Han or a full-size kana."""
    text = piece.removeprefix(WORD_MARK)
    if not text:
        return False
    name = unicodedata.name(text[0], "")
    return name.startswith(_HAN) or (name.startswith(_KANA) and "SMALL" not in name.split())


def is_word_start(piece: str, rule: str) -> bool:
    """Whether `piece` begins a word under `rule` (one of RULES)."""
    if piece.startswith((WORD_MARK, "<")) or piece in _PUNCTUATION:
        return True
    return rule == MARKER_HAN_KANA and begins_han_or_kana(piece)


def rule_for(pieces: list[str]) -> str:
    """The rule in effect for a vocabulary: MARKER_HAN_KANA if it changes any piece's flag."""
    changed = any(is_word_start(p, MARKER_HAN_KANA) != is_word_start(p, MARKER) for p in pieces)
    return MARKER_HAN_KANA if changed else MARKER
