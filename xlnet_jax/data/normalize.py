"""The original XLNet text normalisation, applied before SentencePiece sees any text.

Same steps as the reference's `preprocess_text` (and HuggingFace's XLNetTokenizer with
keep_accents=False): collapse whitespace, turn the LaTeX quotes `` and '' into ", decompose
(NFKD) and drop combining marks (accents), and optionally lowercase. One step more: control
characters (NUL, ESC, DEL, C1) become spaces, where SentencePiece would make each an <unk>;
the corpus readers count the lines that held any (manifest). keep_accents skips NFKD and the
mark stripping (SentencePiece's own NFKC still applies), so é, ñ, ệ and が survive. A tokenizer
trained on normalised text must only ever see text normalised the same way, so the corpus and
any later input go through this same function with the corpus's options.
"""

import collections
import functools
import re
import sys
import unicodedata

# The C0/C1 control characters that str.split() does not already treat as whitespace.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def normalization_options(uncased: bool, keep_accents: bool = False) -> dict:
    """The options as recorded in the manifest: what `normalize` does to the text.

    keep_accents shows as nfkd_strip_accents false: no new key, so the manifests (and
    fingerprints) of corpora prepared with the default stay what they were.
    """
    return {
        "collapse_whitespace": True,
        "control_chars_to_space": True,
        "latex_quotes_to_double_quote": True,
        "nfkd_strip_accents": not keep_accents,
        "lowercase": uncased,
    }


@functools.cache
def combining_marks() -> str:
    """Every combining code point (about 900, built once: ~0.1 s), as one string."""
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.combining(chr(c)))


@functools.cache
def _combining_marks() -> re.Pattern:
    """combining_marks() as a regex character class."""
    return re.compile(f"[{re.escape(combining_marks())}]")


def normalize(text: str, *, uncased: bool, keep_accents: bool = False) -> str:
    """One line of text as the tokenizer expects it; '' when nothing but whitespace is left."""
    text = " ".join(CONTROL_CHARS.sub(" ", text).split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():
        text = _combining_marks().sub("", unicodedata.normalize("NFKD", text))
    if uncased:
        text = text.lower()
    return text


def normalize_document(
    raw: list[str], *, uncased: bool, keep_accents: bool = False
) -> tuple[list[str], list[int]]:
    """A document's non-empty normalised lines, and [characters, non-ASCII letters, of them
    lost] for prepare's accent hint (the letters are only counted when accents go)."""
    lines, counts = [], [0, 0, 0]
    for text in raw:
        counts[0] += len(text)
        line = normalize(text, uncased=uncased, keep_accents=keep_accents)
        if line and not keep_accents and not text.isascii():
            letters, lost = lost_letters(text, line)
            counts[1] += letters
            counts[2] += lost
        if line:
            lines.append(line)
    return lines, counts


def lost_letters(raw: str, normalized: str) -> tuple[int, int]:
    """(non-ASCII letters of `raw`, how many of them `normalized` no longer holds).

    Both sides are compared after NFKC, as SentencePiece sees them, and lowercased (case is
    not an accent): Hangul that NFKD splits into jamo comes back whole and counts as kept; é
    that became e, or が that became か, is lost.
    """

    def letters(text: str) -> collections.Counter:
        text = unicodedata.normalize("NFKC", text).lower()
        return collections.Counter(c for c in text if ord(c) > 127 and c.isalpha())

    before = letters(raw)
    return sum(before.values()), sum((before - letters(normalized)).values())
