"""The original XLNet text normalisation, applied before SentencePiece sees any text.

Same steps as the reference's `preprocess_text` (and HuggingFace's XLNetTokenizer with
keep_accents=False): collapse whitespace, turn the LaTeX quotes `` and '' into ", decompose
(NFKD) and drop combining marks (accents), and optionally lowercase. A tokenizer trained
on normalised text must only ever see normalised text, so the corpus and any later
fine-tuning input go through this same function.
"""

import functools
import re
import sys
import unicodedata


def normalization_options(uncased: bool) -> dict:
    """The options as recorded in the manifest: what `normalize` does to the text."""
    return {
        "collapse_whitespace": True,
        "latex_quotes_to_double_quote": True,
        "nfkd_strip_accents": True,
        "lowercase": uncased,
    }


@functools.cache
def _combining_marks() -> re.Pattern:
    """A character class of every combining code point (about 900, built once: ~0.1 s)."""
    marks = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.combining(chr(c)))
    return re.compile(f"[{re.escape(marks)}]")


def normalize(text: str, *, uncased: bool) -> str:
    """One line of text as the tokenizer expects it; '' when nothing but whitespace is left."""
    text = " ".join(text.split())
    text = text.replace("``", '"').replace("''", '"')
    if not text.isascii():
        text = _combining_marks().sub("", unicodedata.normalize("NFKD", text))
    if uncased:
        text = text.lower()
    return text
