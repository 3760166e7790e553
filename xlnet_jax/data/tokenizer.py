"""SentencePiece: the special pieces at fixed ids, training, checking and encoding.

The ids are those of the released XLNet vocabulary, so released checkpoints and
HuggingFace's XLNetTokenizer agree with ours:

  <unk>=0 <s>=1 </s>=2 <cls>=3 <sep>=4 <pad>=5 <mask>=6 <eod>=7 <eop>=8

<cls> <sep> <pad> <mask> <eod> are control symbols (never produced from text); <eop> is a
user-defined symbol (matched in text), as in the original `spm_train` command.

Encoding is SentencePiece's, then the original's digit-comma split (`prepro_utils.
encode_pieces`, also transformers 4's slow XLNetTokenizer._tokenize): a piece of more than one
character that ends in a digit and "," is replaced by the pieces of its text without the word
mark and the comma, then ",". A piece that did not start with the word mark loses the mark
SentencePiece puts before its first sub-piece (a lone mark is dropped; the rest is looked up
as is, <unk> when absent). Every path that turns text into ids (pretraining's prepare, the
fine-tuning tasks, SQuAD's windows) goes through `encode_texts`/`digit_comma_splits`.

The encode functions at the bottom run in worker processes: this module imports nothing
heavier than numpy and sentencepiece, so spawned workers start fast.
"""

import io
import re
from collections.abc import Iterable

import numpy as np
import sentencepiece as spm

from xlnet_jax.data import word_starts
from xlnet_jax.errors import DataError

SPECIAL_PIECES = ("<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>")
SPECIAL_IDS = {piece: i for i, piece in enumerate(SPECIAL_PIECES)}
SEP_ID = SPECIAL_IDS["<sep>"]
CLS_ID = SPECIAL_IDS["<cls>"]
PAD_ID = SPECIAL_IDS["<pad>"]
EOD_ID = SPECIAL_IDS["<eod>"]

# Fixed, not the machine's core count: SentencePiece's result depends on its thread count.
TRAIN_THREADS = 16
# About this many sentences train SentencePiece: a sample drawn by document_keys (the
# same on every path), which SentencePiece then takes whole, in the order given.
TRAIN_SENTENCES = 10_000_000


def train_tokenizer(sentences: Iterable[str], model_path: str, vocab_size: int) -> None:
    """Trains a unigram model on normalised sentences into model_path.

    The text is fed as an iterator and the model written from memory, so no file path ends
    up in the model's stored training spec: the same sentences give the same bytes anywhere.
    """
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=0.99995,
            input_sentence_size=0,  # all of the sample: it is bounded already
            shuffle_input_sentence=False,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>"],
            user_defined_symbols=["<eop>"],
            num_threads=TRAIN_THREADS,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise _vocab_error(str(e), vocab_size) from None
    with open(model_path, "wb") as f:
        f.write(model.getvalue())
    check_special_ids(load_processor(model_path), model_path)


def _vocab_error(message: str, vocab_size: int) -> DataError:
    """SentencePiece's training error as a DataError that says which vocab_size would work."""
    if m := re.search(
        r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message
    ):
        limit = int(m.group(2))
        nice = max(100 * (limit // 100), limit // 2) if limit >= 200 else limit
        return DataError(
            f"vocab_size {vocab_size} is too large for this corpus: SentencePiece can build at "
            f"most {limit} pieces from it. Pass a vocab_size <= {limit} (e.g. {nice}) or add text."
        )
    if m := re.search(r"smaller than required_chars\. (\d+) vs (\d+)", message):
        return DataError(
            f"vocab_size {vocab_size} is smaller than the {m.group(2)} characters and special "
            f"pieces this corpus needs; pass a vocab_size of at least {m.group(2)}."
        )
    return DataError(f"SentencePiece training failed: {message.splitlines()[-1]}")


def load_processor(path: str) -> spm.SentencePieceProcessor:
    """Loads a .model file, local or on object storage (gs://), as a DataError if it is not
    one. Its bytes are read through the path layer and handed to SentencePiece as a proto:
    SentencePiece itself opens only local files (a gs:// model_file was NOT_FOUND)."""
    try:
        if "://" in path:
            from xlnet_jax import paths  # storage's stack, only for a remote model

            data = paths.as_path(path).read_bytes()
        else:
            with open(path, "rb") as f:
                data = f.read()
        return spm.SentencePieceProcessor(model_proto=data)
    except (OSError, RuntimeError) as e:
        raise DataError(f"{path} is not a readable SentencePiece model ({e}).") from None


def check_special_ids(sp: spm.SentencePieceProcessor, path: str) -> None:
    """Refuses a model whose special pieces are not at the ids XLNet expects."""
    wrong = []
    for piece, expected in SPECIAL_IDS.items():
        actual = sp.piece_to_id(piece)  # unknown pieces map to <unk>'s id
        if actual != expected:
            absent = actual == sp.unk_id() and piece != "<unk>"
            wrong.append(f"{piece} is {'absent' if absent else actual}")
    if wrong:
        raise DataError(
            f"{path}: special pieces are not at XLNet's ids ({SPECIAL_IDS}): {'; '.join(wrong)}. "
            "Train a model "
            "with `xlnet-jax prepare` (no --spm_model), or retrain yours with "
            "unk_id=0 bos_id=1 eos_id=2 pad_id=-1 control_symbols=<cls>,<sep>,<pad>,<mask>,<eod> "
            "user_defined_symbols=<eop>."
        )


def piece_tables(sp: spm.SentencePieceProcessor, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-id lookup tables (is_word_start, is_functional), bool [vocab_size].

    A word start is where a span of the PLM objective may begin, under the corpus's
    word-start rule (see word_starts). Functional ids are <sep>, <cls> and <pad>.
    """
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    word_start = np.array([word_starts.is_word_start(p, rule) for p in pieces], dtype=bool)
    functional = np.zeros(len(pieces), dtype=bool)
    functional[[SEP_ID, CLS_ID, PAD_ID]] = True
    return word_start, functional


WORD_MARK = "\u2581"

# A piece's id -> what the digit-comma split puts in its place: (id, characters of the
# normalised text it covers) per sub-piece, the comma last.
DigitCommaSplits = dict[int, tuple[tuple[int, int], ...]]


def is_digit_comma_piece(piece: str) -> bool:
    """Whether the original's encode_pieces re-encodes this piece: more than one character,
    ending in a digit and ","."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def digit_comma_splits(sp: spm.SentencePieceProcessor) -> DigitCommaSplits:
    """The digit-comma split of every piece of the vocabulary it applies to (a function of
    the piece alone, so it is worked out once per model)."""
    splits: DigitCommaSplits = {}
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if sp.is_control(i) or sp.is_unknown(i) or not is_digit_comma_piece(piece):
            continue
        sub = sp.encode(piece[:-1].replace(WORD_MARK, ""), out_type=str)
        if not piece.startswith(WORD_MARK) and sub and sub[0].startswith(WORD_MARK):
            sub = sub[1:] if sub[0] == WORD_MARK else [sub[0][1:], *sub[1:]]
        splits[i] = tuple((sp.piece_to_id(p), len(p.lstrip(WORD_MARK))) for p in [*sub, piece[-1]])
    return splits


def split_digit_commas(ids: list[int], splits: DigitCommaSplits) -> list[int]:
    """`ids` with each digit-comma piece replaced by its split (the same list when none)."""
    if not any(i in splits for i in ids):
        return ids
    out = []
    for i in ids:
        out.extend((sub for sub, _ in splits[i]) if i in splits else (i,))
    return out


def encode_texts(
    sp: spm.SentencePieceProcessor, texts: list[str], splits: DigitCommaSplits
) -> list[list[int]]:
    """Normalised texts -> ids as the original encodes them: SentencePiece, then the
    digit-comma split (`splits` = digit_comma_splits(sp))."""
    encoded = sp.encode(texts, num_threads=1)  # callers parallelise across processes
    return [split_digit_commas(ids, splits) for ids in encoded]


_worker_sp: spm.SentencePieceProcessor | None = None
_worker_splits: DigitCommaSplits = {}


def init_worker(model_path: str) -> None:
    """Loads the model (and its digit-comma splits) once per worker process."""
    global _worker_sp, _worker_splits
    _worker_sp = load_processor(model_path)
    _worker_splits = digit_comma_splits(_worker_sp)


def encode_documents(docs: list[list[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """encode_with(the worker's model, docs)."""
    return encode_with(_worker_sp, docs, _worker_splits)


def encode_with(
    sp: spm.SentencePieceProcessor,
    docs: list[list[str]],
    splits: DigitCommaSplits | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Normalised documents -> (token ids, sentence lengths) per document, int32, encoded by
    encode_texts (`splits` worked out here when not given).

    Sentences that encode to nothing are dropped; a document left empty gives empty arrays.
    """
    flat = [s for doc in docs for s in doc]
    if splits is None:
        splits = digit_comma_splits(sp)
    encoded = encode_texts(sp, flat, splits)
    out, i = [], 0
    for doc in docs:
        pieces = [ids for ids in encoded[i : i + len(doc)] if ids]
        i += len(doc)
        lengths = np.array([len(ids) for ids in pieces], dtype=np.int32)
        tokens = np.fromiter(
            (t for ids in pieces for t in ids), dtype=np.int32, count=lengths.sum()
        )
        out.append((tokens, lengths))
    return out
