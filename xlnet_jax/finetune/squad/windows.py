"""Questions -> model windows, as the original's `run_squad` builds them.

A window is `paragraph piece run <sep> question <sep> <cls>`: the paragraph first because in
pretraining the second segment is the shorter one. A paragraph longer than the room left by
the question becomes overlapping windows that start `doc_stride` pieces apart; each piece is
scored only in the window where it has the most context on both sides (`max_context`).
Segment ids: paragraph and its <sep> 0, question and its <sep> 1, <cls> 2; padding is added
when windows are batched (`batch`), on the right with input_mask 1, as the original.
p_mask is 1 where no answer may start or end: the question, the <sep>s and padding, but not
<cls>, which is where a no-answer points. Labels come from a question's first answer (the
training label; on dev they give the dev loss): a window that does not hold the whole
answer is a no-answer window (start = end = <cls>), as an unanswerable question.
"""

import dataclasses

import numpy as np
import sentencepiece as spm

from xlnet_jax.data import tokenizer
from xlnet_jax.data.tokenizer import CLS_ID, PAD_ID, SEP_ID
from xlnet_jax.errors import ConfigError
from xlnet_jax.finetune import tsv
from xlnet_jax.finetune.squad import offsets
from xlnet_jax.finetune.squad.reading import Question

SEG_PARAGRAPH, SEG_QUESTION, SEG_CLS, SEG_PAD = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Window:
    """One model input over part of one question's paragraph.

    Attributes:
      question: index of the question in its split.
      input_ids, seg_ids, p_mask: int32 [n] (unpadded; n <= seq_len).
      paragraph_len: the paragraph pieces at the window's start.
      cls_index: position of <cls> (n - 1).
      start_position, end_position: the first answer's pieces in the window, or cls_index
        for a no-answer window.
      is_impossible: 1.0 for a no-answer window, else 0.0.
      char_start, char_end: int64 [paragraph_len]: the paragraph characters of each piece.
      max_context: bool [paragraph_len]: this window is where the piece has most context.
    """

    question: int
    input_ids: np.ndarray
    seg_ids: np.ndarray
    p_mask: np.ndarray
    paragraph_len: int
    cls_index: int
    start_position: int
    end_position: int
    is_impossible: float
    char_start: np.ndarray
    char_end: np.ndarray
    max_context: np.ndarray


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """The windowing settings (the original's flags of the same names).

    Attributes:
      seq_len: the window length (max_seq_length).
      doc_stride: pieces between the starts of consecutive windows.
      max_query_length: question pieces kept (the first ones); question_windows prints how
        many questions were cut.
      uncased, keep_accents: the tokenizer's normalisation (the corpus's).
    """

    seq_len: int
    doc_stride: int
    max_query_length: int
    uncased: bool
    keep_accents: bool = False

    def check(self) -> None:
        """ConfigError naming the field when the windows cannot hold a paragraph piece."""
        for name in ("seq_len", "doc_stride", "max_query_length"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}.")
        if self.seq_len - self.max_query_length - 3 <= 0:
            raise ConfigError(
                f"seq_len {self.seq_len} leaves no room for the paragraph after "
                f"max_query_length {self.max_query_length} and 3 special pieces."
            )


def spans(total: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of the windows over `total` paragraph pieces, `room` per window."""
    out, start = [], 0
    while True:
        length = min(total - start, room)
        out.append((start, length))
        if start + length >= total:
            return out
        start += min(length, stride)


def max_context(spans_: list[tuple[int, int]], total: int) -> np.ndarray:
    """bool [windows, total]: whether window w is where piece p has its largest context score,
    min(left, right context) + 0.01 * window length (the original's; the first window wins
    ties)."""
    positions = np.arange(total)
    scores = np.full((len(spans_), total), -np.inf)
    for w, (start, length) in enumerate(spans_):
        inside = (positions >= start) & (positions < start + length)
        context = np.minimum(positions - start, start + length - 1 - positions) + 0.01 * length
        scores[w] = np.where(inside, context, -np.inf)
    return np.arange(len(spans_))[:, None] == scores.argmax(axis=0)[None, :]


def question_windows(
    sp: spm.SentencePieceProcessor,
    questions: list[Question],
    config: WindowConfig,
) -> list[Window]:
    """Every question's windows, in question order (a paragraph is tokenised once)."""
    config.check()
    paragraphs: dict[str, offsets.Pieces] = {}
    splits = tokenizer.digit_comma_splits(sp)
    windows, cut = [], []
    for q, question in enumerate(questions):
        if question.context not in paragraphs:
            paragraphs[question.context] = offsets.tokenize(
                sp,
                question.context,
                uncased=config.uncased,
                keep_accents=config.keep_accents,
                splits=splits,
            )
        query = offsets.tokenize(
            sp,
            question.question,
            uncased=config.uncased,
            keep_accents=config.keep_accents,
            splits=splits,
        ).ids
        if len(query) > config.max_query_length:
            cut.append((len(query), question.qid))
        windows += _windows(
            q, question, paragraphs[question.context], query[: config.max_query_length], config
        )
    if cut:
        tsv.note(
            f"SQuAD: max_query_length {config.max_query_length} cut {len(cut)} of "
            f"{len(questions)} questions to their first pieces (longest {max(cut)[0]} pieces; "
            f"first: question {cut[0][1]}); raise --config.max_query_length to keep them whole"
        )
    return windows


def _answer_pieces(question: Question, pieces: offsets.Pieces) -> tuple[int, int]:
    """(first, last) paragraph piece of the question's first answer."""
    text = question.answer_text
    start = question.answer_start + len(text) - len(text.lstrip())
    end = question.answer_start + len(text.rstrip())
    return pieces.covering(start, end)


def _windows(
    q: int,
    question: Question,
    pieces: offsets.Pieces,
    query: np.ndarray,
    config: WindowConfig,
) -> list[Window]:
    room = config.seq_len - len(query) - 3
    spans_ = spans(len(pieces.ids), room, config.doc_stride)
    best = max_context(spans_, len(pieces.ids))
    answer = None if question.is_impossible else _answer_pieces(question, pieces)
    out = []
    for i, (start, length) in enumerate(spans_):
        stop = start + length
        input_ids = np.concatenate(
            [pieces.ids[start:stop], [SEP_ID], query, [SEP_ID, CLS_ID]]
        ).astype(np.int32)
        seg_ids = np.array(
            [SEG_PARAGRAPH] * (length + 1) + [SEG_QUESTION] * (len(query) + 1) + [SEG_CLS],
            dtype=np.int32,
        )
        p_mask = np.ones(len(input_ids), dtype=np.int32)
        p_mask[:length] = 0
        cls_index = len(input_ids) - 1
        p_mask[cls_index] = 0
        first, last = cls_index, cls_index
        if answer is not None and start <= answer[0] and answer[1] < stop:
            first, last = answer[0] - start, answer[1] - start
        out.append(
            Window(
                question=q,
                input_ids=input_ids,
                seg_ids=seg_ids,
                p_mask=p_mask,
                paragraph_len=length,
                cls_index=cls_index,
                start_position=first,
                end_position=last,
                is_impossible=float(first == cls_index),
                char_start=pieces.start[start:stop],
                char_end=pieces.end[start:stop],
                max_context=best[i, start:stop],
            )
        )
    return out


def batch(windows: list[Window], seq_len: int) -> dict[str, np.ndarray]:
    """Windows as one batch of arrays [B, seq_len], padded on the right.

    input_mask is 1 on padding (the original's convention, as HF's `input_mask`).
    """
    size = len(windows)
    out = {
        "input_ids": np.full((size, seq_len), PAD_ID, np.int32),
        "seg_ids": np.full((size, seq_len), SEG_PAD, np.int32),
        "input_mask": np.ones((size, seq_len), np.float32),
        "p_mask": np.ones((size, seq_len), np.float32),
    }
    for b, window in enumerate(windows):
        n = len(window.input_ids)
        out["input_ids"][b, :n] = window.input_ids
        out["seg_ids"][b, :n] = window.seg_ids
        out["input_mask"][b, :n] = 0
        out["p_mask"][b, :n] = window.p_mask
    out["cls_index"] = np.array([w.cls_index for w in windows], np.int32)
    out["start_positions"] = np.array([w.start_position for w in windows], np.int32)
    out["end_positions"] = np.array([w.end_position for w in windows], np.int32)
    out["is_impossible"] = np.array([w.is_impossible for w in windows], np.float32)
    return out
