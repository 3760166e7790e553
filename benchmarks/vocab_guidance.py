"""Vocabulary guidance per script: the smallest vocabulary SentencePiece accepts for a text,
and how many tokens a piece gets, and how many pieces stay rare, at sizes above it.

Texts: the Chinese, Japanese and Korean manual pages of this machine (/usr/share/man/zh_CN,
ja, ko; groff markup stripped), English manual pages of about the same size (man1), the
built-in corpus (stdlib docstrings) and the shared seed notes given with --seeds. Each text
goes through the corpus normalisation (normalize.normalize) and then SentencePiece's unigram
trainer with prepare's settings (tokenizer.train_tokenizer), so the limits are prepare's.

  python benchmarks/vocab_guidance.py [--seeds DIR] [--sizes 1000,2000,4000,8000]

Prints a markdown table: characters of the text after normalisation; distinct characters
as SentencePiece sees them (after NFKC, which joins NFKD's Hangul jamo into syllables
again); the smallest vocab_size prepare accepts (SentencePiece's required characters at
character_coverage 0.99995, plus the special pieces); and per vocab size the tokens of the
text, the tokens per piece and the share of pieces that occur fewer than 10 times in the
text ("rare": their embeddings learn from a handful of examples), or "refused" with the
bound SentencePiece named (that bound varies between runs, and probing it alone takes
minutes on a busy machine, so it is not probed separately).
"""

import argparse
import glob
import gzip
import os
import re
import tempfile
import unicodedata

import numpy as np
import sentencepiece as spm

from xlnet_jax.data import builtin_corpus, tokenizer
from xlnet_jax.data.normalize import normalize
from xlnet_jax.errors import DataError

# groff requests (".TH", "'\""), font escapes (\fB), special characters (\(em) and the rest.
_REQUEST = re.compile(r"^[.']")
# A piece seen fewer times than this in the text counts as rare.
RARE = 10
_ESCAPES = re.compile(r"\\(f[A-Z0-9]|f\(..|f\[[^]]*\]|\(..|\[[^]]*\]|s[-+]?\d|[-&e|^ ])")


def man_lines(directory: str, limit_bytes: int | None = None) -> list[str]:
    """Text lines of the manual pages under `directory`, markup stripped, files in name
    order up to about limit_bytes of text."""
    lines, size = [], 0
    for path in sorted(glob.glob(os.path.join(directory, "**", "*.gz"), recursive=True)):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            for raw in f:
                if _REQUEST.match(raw):
                    continue
                line = _ESCAPES.sub(lambda m: "-" if m.group(1) == "-" else "", raw).strip()
                if line:
                    lines.append(line)
                    size += len(line.encode())
        if limit_bytes and size >= limit_bytes:
            break
    return lines


def file_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.strip() for line in f if line.strip()]


def vocab_limit(text_file: str, vocab_size: int) -> int:
    """The bound SentencePiece names when refusing vocab_size (too small or too large)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            tokenizer.train_tokenizer(text_file, os.path.join(tmp, "m.model"), vocab_size)
        except DataError as e:
            found = re.search(r"(at least|<=) (\d+)", str(e))
            if found:
                return int(found.group(2))
            raise
    return vocab_size


def tokens_at(text_file: str, lines: list[str], vocab_size: int) -> tuple[int, float]:
    """Tokens of the text under a vocabulary of vocab_size trained on it, and the share of
    its pieces (special ones aside) that occur fewer than RARE times in the text."""
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m.model")
        tokenizer.train_tokenizer(text_file, model, vocab_size)
        sp = spm.SentencePieceProcessor(model_file=model)
        ids = np.concatenate([np.asarray(i, np.int64) for i in sp.encode(lines) if i])
    counts = np.bincount(ids, minlength=vocab_size)[len(tokenizer.SPECIAL_PIECES) :]
    return len(ids), float(np.mean(counts < RARE))


def measure(name: str, raw: list[str], sizes: list[int]) -> str:
    lines = [line for line in (normalize(r, uncased=False) for r in raw) if line]
    text = "".join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        text_file = os.path.join(tmp, "text.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        smallest = vocab_limit(text_file, len(tokenizer.SPECIAL_PIECES) + 1)
        cells = []
        for size in sizes:
            if size < smallest:
                cells.append("refused")
                continue
            try:
                tokens, rare = tokens_at(text_file, lines, size)
            except DataError as e:  # too large: SentencePiece names its bound for this run
                found = re.search(r"at most (\d+)", str(e))
                cells.append(f"refused (at most {found.group(1)})" if found else "refused")
                continue
            cells.append(f"{tokens:,}; {tokens / size:.0f}/piece; {rare:.0%} rare")
    return (
        f"| {name} | {len(text):,} | {len(set(unicodedata.normalize('NFKC', text))):,} | "
        f"{smallest:,} | " + " | ".join(cells) + " |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="/work/shared/seeds", help="seed notes directory")
    parser.add_argument("--sizes", default="1000,2000,4000,8000", help="vocab sizes to try")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    texts = [
        ("Chinese man pages (zh_CN)", man_lines("/usr/share/man/zh_CN")),
        ("Japanese man pages (ja)", man_lines("/usr/share/man/ja")),
        ("Korean man pages (ko)", man_lines("/usr/share/man/ko")),
        ("English man pages (man1, first ~150 KB)", man_lines("/usr/share/man/man1", 150_000)),
        (
            "English built-in corpus (stdlib docstrings)",
            [s for doc in builtin_corpus.builtin_documents() for s in doc],
        ),
    ]
    seeds = {"zh": "003_*.txt", "ko": "002_*.repaired-utf8.txt", "en": "000_*.repaired-utf8.txt"}
    for lang, pattern in seeds.items():
        for path in sorted(glob.glob(os.path.join(args.seeds, pattern))):
            texts.append((f"seed note ({lang}) {os.path.basename(path)}", file_lines(path)))

    header = " | ".join(f"tokens at {s:,}" for s in sizes)
    print(f"| text | characters | distinct characters | smallest vocab_size | {header} |")
    print("|---" * (4 + len(sizes)) + "|")
    for name, raw in texts:
        print(measure(name, raw, sizes), flush=True)


if __name__ == "__main__":
    main()
