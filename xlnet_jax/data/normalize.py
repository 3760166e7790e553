"""The original XLNet text normalisation, applied before SentencePiece sees any text.

Same steps as the reference's `preprocess_text` (and HuggingFace's XLNetTokenizer with
keep_accents=False): collapse whitespace, turn the LaTeX quotes `` and '' into ", decompose
(NFKD) and drop combining marks (accents), and optionally lowercase. One step more: control
characters (NUL, ESC, DEL, C1) become spaces, where SentencePiece would make each an <unk>;
the corpus readers count the lines that held any (manifest). A tokenizer trained
on normalised text must only ever see normalised text, so the corpus and any later
fine-tuning input go through this same function.
"""

import functools
import re
import sys
import unicodedata

# The C0/C1 control characters that str.split() does not already treat as whitespace.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def normalization_options(uncased: bool) -> dict:
    """The options as recorded in the manifest: what `normalize` does to the text."""
    return {
        "collapse_whitespace": True,
        "control_chars_to_space": True,
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
    text = " ".join(CONTROL_CHARS.sub(" ", text).split())
    text = text.replace("``", '"').replace("''", '"')
    if not text.isascii():
        text = _combining_marks().sub("", unicodedata.normalize("NFKD", text))
    if uncased:
        text = text.lower()
    return text
