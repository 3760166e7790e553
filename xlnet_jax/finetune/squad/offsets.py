"""Characters of the original text <-> SentencePiece pieces, exactly, through our normalisation.

The tokenizer sees `normalize(text)` (data/normalize.py: control characters to spaces,
whitespace runs collapsed, LaTeX quotes, NFKD with accents dropped, lowercasing), which
changes lengths. `normalize_with_spans` repeats those steps one character at a time and keeps,
for each normalised character, the span of original characters it came from; it checks its
result against `normalize` itself, so the two can never drift apart. SentencePiece reports
each piece's byte span in the normalised text (its own NFKC included), which the spans then
carry back to the original: a piece's text is cut from the original paragraph, never rebuilt.
"""

import dataclasses
import unicodedata

import numpy as np
import sentencepiece as spm

from xlnet_jax.data import tokenizer
from xlnet_jax.data.normalize import CONTROL_CHARS, normalize

# (character, original start, original end) of one normalised character.
_Char = tuple[str, int, int]


def normalize_with_spans(
    text: str, *, uncased: bool, keep_accents: bool = False
) -> tuple[str, np.ndarray, np.ndarray]:
    """(normalize(text), start, end): normalised character k came from text[start[k]:end[k]].

    A character that normalisation drops (a combining accent) widens the span of the
    character before it; a dropped space belongs to nothing.
    """
    chars = _collapse_whitespace(text)
    chars = _merge_pairs(_merge_pairs(chars, "`"), "'")
    if not keep_accents and not all(c.isascii() for c, _, _ in chars):
        chars = _strip_accents(chars)
    if uncased:
        chars = _lowercase(chars)
    normalized = "".join(c for c, _, _ in chars)
    expected = normalize(text, uncased=uncased, keep_accents=keep_accents)
    if normalized != expected:  # a normalisation step this module does not mirror
        raise AssertionError(f"normalize_with_spans out of step with normalize on {text!r}")
    start = np.array([s for _, s, _ in chars], dtype=np.int64)
    end = np.array([e for _, _, e in chars], dtype=np.int64)
    return normalized, start, end


def _collapse_whitespace(text: str) -> list[_Char]:
    """Control characters as spaces, then " ".join(text.split()), with spans."""
    chars: list[_Char] = []
    pending_space = -1
    for i, c in enumerate(text):
        if c.isspace() or CONTROL_CHARS.match(c):
            if chars and pending_space < 0:
                pending_space = i
            continue
        if pending_space >= 0:
            chars.append((" ", pending_space, pending_space + 1))
            pending_space = -1
        chars.append((c, i, i + 1))
    return chars


def _merge_pairs(chars: list[_Char], quote: str) -> list[_Char]:
    """Each pair of `quote` (left to right, as str.replace) as one '"'."""
    out: list[_Char] = []
    i = 0
    while i < len(chars):
        if chars[i][0] == quote and i + 1 < len(chars) and chars[i + 1][0] == quote:
            out.append(('"', chars[i][1], chars[i + 1][2]))
            i += 2
        else:
            out.append(chars[i])
            i += 1
    return out


def _strip_accents(chars: list[_Char]) -> list[_Char]:
    """NFKD, combining marks dropped. Per character equals whole-text: NFKD's reordering only
    moves combining marks, and those are all dropped."""
    out: list[_Char] = []
    for c, s, e in chars:
        kept = [d for d in unicodedata.normalize("NFKD", c) if not unicodedata.combining(d)]
        if kept:
            out.extend((d, s, e) for d in kept)
        elif out:
            out[-1] = (out[-1][0], out[-1][1], e)
    return out


def _lowercase(chars: list[_Char]) -> list[_Char]:
    """str.lower() with spans: lengths per character, letters from the whole text (whose
    final-sigma rule depends on context but never changes a length)."""
    whole = "".join(c for c, _, _ in chars).lower()
    out: list[_Char] = []
    for c, s, e in chars:
        out.extend((whole[len(out) + j], s, e) for j in range(len(c.lower())))
    return out


@dataclasses.dataclass(frozen=True)
class Pieces:
    """A text as SentencePiece ids, each with the original characters it covers.

    Attributes:
      ids: int32 [N] piece ids.
      start, end: int64 [N]: piece n covers text[start[n]:end[n]], its leading space left
        out; a piece of only a space (a lone "▁") has start == end, at the next character.
    """

    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def covering(self, char_start: int, char_end: int) -> tuple[int, int]:
        """(first, last) piece of the smallest run of pieces covering text[char_start:char_end]
        (inclusive; the span must hold a non-space character)."""
        real = self.end > self.start
        first = np.flatnonzero(real & (self.end > char_start))
        last = np.flatnonzero(real & (self.start < char_end))
        if not len(first) or not len(last) or first[0] > last[-1]:
            raise ValueError(f"no piece covers characters [{char_start}, {char_end})")
        return int(first[0]), int(last[-1])


def tokenize(
    sp: spm.SentencePieceProcessor,
    text: str,
    *,
    uncased: bool,
    keep_accents: bool = False,
    splits: tokenizer.DigitCommaSplits | None = None,
) -> Pieces:
    """`text` normalised and encoded as pretraining encodes it (SentencePiece, then the
    digit-comma split: `splits` = tokenizer.digit_comma_splits(sp), worked out here when not
    given), with each piece's span in `text`."""
    if splits is None:
        splits = tokenizer.digit_comma_splits(sp)
    normalized, start, end = normalize_with_spans(text, uncased=uncased, keep_accents=keep_accents)
    encoded = sp.encode(normalized, return_type="proto")
    byte_lengths = np.array([len(c.encode("utf-8")) for c in normalized], dtype=np.int64)
    # char_at[b]: the normalised character that byte b belongs to (one past the end: len).
    char_at = np.append(np.repeat(np.arange(len(normalized)), byte_lengths), len(normalized))
    spans = []  # (id, first normalised character, one past the last)
    for piece in encoded.pieces:
        first, stop = int(char_at[piece.begin]), int(char_at[piece.end])
        if piece.id not in splits:
            spans.append((piece.id, first, stop))
            continue
        # the sub-pieces' characters end the piece's span (the comma last); the first
        # sub-piece also covers what comes before them (the space of a word mark)
        position = stop - sum(length for _, length in splits[piece.id])
        for k, (sub_id, length) in enumerate(splits[piece.id]):
            spans.append((sub_id, first if k == 0 else position, position + length))
            position += length
    ids = np.array([i for i, _, _ in spans], dtype=np.int32)
    piece_start = np.empty(len(spans), dtype=np.int64)
    piece_end = np.empty(len(spans), dtype=np.int64)
    after = np.append(start, len(text))  # original position of each normalised char, and the end
    for n, (_, first, stop) in enumerate(spans):
        while first < stop and normalized[first].isspace():
            first += 1
        if first < stop:
            piece_start[n], piece_end[n] = start[first], end[stop - 1]
        else:
            piece_start[n] = piece_end[n] = after[first]
    return Pieces(ids, piece_start, piece_end)
