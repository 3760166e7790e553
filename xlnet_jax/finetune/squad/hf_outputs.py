"""SQuAD through transformers: AutoTokenizer's windows in, XLNetForQuestionAnswering's
top-k outputs out, the answers and null odds of our predictions/ (postprocess.predict).

    tokenizer = AutoTokenizer.from_pretrained(export)   # an export-hf of a SQuAD run
    model = XLNetForQuestionAnswering.from_pretrained(export).eval()
    inputs, windows = hf_outputs.encode(
        tokenizer, questions, max_length=512, doc_stride=128, max_query_length=64)
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()})
    predictions, null_odds, nbest = hf_outputs.answers(
        questions, windows, {k: out[k].numpy() for k in hf_outputs.OUTPUTS},
        inputs["attention_mask"], n_best_size=5, max_answer_length=64)

`encode` builds the run's windows (windows.py) with the tokenizer's own pieces: the
question cut to max_query_length pieces, the paragraph cut by the tokenizer's overflow into
windows `doc_stride` pieces apart, each joined by the tokenizer's post-processor into
`paragraph <sep> question <sep> <cls>` with its token types (0, 1, 2); and what the model and
postprocess need besides: p_mask (1 where no answer may start or end: all but the paragraph
pieces and <cls>), cls_index, each piece's characters from the tokenizer's offsets, and the
max-context windows.

HF's outputs differ from the head's own (model/qa_head.py) in two ways that `answers`
undoes: its start_top_log_probs and end_top_log_probs are probabilities (softmax, not
log_softmax), and its end arrays are flattened from [end_n_top, start_n_top] (the ends of
start i at j * start_n_top + i), where ours are [start_n_top, end_n_top].
"""

from collections.abc import Mapping, Sequence

import numpy as np

from xlnet_jax.finetune.squad import postprocess
from xlnet_jax.finetune.squad.reading import Question
from xlnet_jax.finetune.squad.windows import Window, max_context, spans

# The evaluation outputs of XLNetForQuestionAnswering that `answers` reads.
OUTPUTS = (
    "start_top_log_probs",
    "start_top_index",
    "end_top_log_probs",
    "end_top_index",
    "cls_logits",
)


def encode(
    tokenizer,
    questions: Sequence[Question],
    *,
    max_length: int,
    doc_stride: int,
    max_query_length: int,
) -> tuple[dict[str, np.ndarray], list[Window]]:
    """(model inputs: input_ids, token_type_ids, attention_mask, p_mask, cls_index, each
    [windows, ...] and padded on the tokenizer's side; the Windows postprocess reads), for
    `tokenizer`, a transformers tokenizer of an export-hf directory, and the run's windowing
    settings (seq_len as max_length)."""
    backend = tokenizer.backend_tokenizer
    rows, windows = [], []
    for q, question in enumerate(questions):
        query = backend.encode(question.question, add_special_tokens=False)
        query.truncate(max_query_length)
        context = backend.encode(question.context, add_special_tokens=False)
        room = max_length - len(query.ids) - 3
        spans_ = spans(len(context.ids), room, doc_stride)
        best = max_context(spans_, len(context.ids))
        context.truncate(room, stride=room - min(doc_stride, room))
        parts = [context, *context.overflowing]
        if len(parts) != len(spans_):
            raise ValueError(f"{question.qid}: {len(parts)} windows, expected {len(spans_)}")
        for w, part in enumerate(parts):
            full = backend.post_process(part, query, add_special_tokens=True)
            ids = np.array(full.ids, np.int32)
            types = np.array(full.type_ids, np.int32)
            paragraph = (types == 0) & (np.array(full.special_tokens_mask) == 0)
            offsets = np.array(full.offsets, np.int64)[paragraph].reshape(-1, 2)
            p_mask = np.where(paragraph, 0, 1).astype(np.int32)
            p_mask[-1] = 0  # <cls>, where a no-answer points
            rows.append((ids, types, p_mask))
            start, length = spans_[w]
            windows.append(
                Window(
                    question=q,
                    input_ids=ids,
                    seg_ids=types,
                    p_mask=p_mask,
                    paragraph_len=length,
                    cls_index=len(ids) - 1,
                    start_position=len(ids) - 1,
                    end_position=len(ids) - 1,
                    is_impossible=float(question.is_impossible),
                    char_start=offsets[:, 0],
                    char_end=offsets[:, 1],
                    max_context=best[w, start : start + length],
                )
            )
    return _padded(rows, tokenizer.padding_side, tokenizer.pad_token_id), windows


def _padded(rows, side: str, pad_id: int) -> dict[str, np.ndarray]:
    """The windows' rows padded to the longest, on `side` (the tokenizer's)."""
    length = max(len(ids) for ids, _, _ in rows)
    out = {name: [] for name in ("input_ids", "token_type_ids", "attention_mask", "p_mask")}
    for ids, types, p_mask in rows:
        pad = length - len(ids)
        for name, row, fill in (
            ("input_ids", ids, pad_id),
            ("token_type_ids", types, 3),  # XLNetTokenizer's pad_token_type_id
            ("attention_mask", np.ones(len(ids), np.int64), 0),
            ("p_mask", p_mask, 1),
        ):
            padding = np.full(pad, fill, row.dtype)
            out[name].append(np.concatenate([padding, row] if side == "left" else [row, padding]))
    arrays = {name: np.stack(values) for name, values in out.items()}
    arrays["p_mask"] = arrays["p_mask"].astype(np.float32)
    arrays["cls_index"] = np.array(
        [length - 1 if side == "left" else len(ids) - 1 for ids, _, _ in rows], np.int64
    )
    return arrays


def window_results(
    outputs: Mapping[str, np.ndarray], attention_mask: np.ndarray
) -> list[postprocess.WindowResult]:
    """HF's outputs (numpy, one row per window) as the head's WindowResults: log
    probabilities, ends [start_n_top, end_n_top], positions counted from each row's first
    piece (the paragraph's first; `attention_mask`, encode's, tells how far a left-padded row
    is shifted), so that a padding position is never a valid piece."""
    start_log_probs = np.log(np.asarray(outputs["start_top_log_probs"], np.float64))
    windows, k = start_log_probs.shape
    end_log_probs = np.log(np.asarray(outputs["end_top_log_probs"], np.float64))
    e = end_log_probs.shape[1] // k

    def by_start(flat: np.ndarray) -> np.ndarray:
        return np.asarray(flat).reshape(windows, e, k).transpose(0, 2, 1)

    shift = np.argmax(np.asarray(attention_mask) > 0, axis=1)
    start_index = _invalid_if_negative(np.asarray(outputs["start_top_index"]) - shift[:, None])
    end_index = _invalid_if_negative(by_start(outputs["end_top_index"]) - shift[:, None, None])
    end_log_probs = by_start(end_log_probs)
    cls_logits = np.asarray(outputs["cls_logits"], np.float64)
    return [
        postprocess.WindowResult(
            start_log_probs[n], start_index[n], end_log_probs[n], end_index[n], cls_logits[n]
        )
        for n in range(windows)
    ]


def _invalid_if_negative(index: np.ndarray) -> np.ndarray:
    """Positions before the row's first piece (padding) as one past any paragraph."""
    return np.where(index < 0, np.iinfo(np.int32).max, index)


def answers(
    questions: Sequence[Question],
    windows: list[Window],
    outputs: Mapping[str, np.ndarray],
    attention_mask: np.ndarray,
    *,
    n_best_size: int,
    max_answer_length: int,
    original: bool = True,
) -> tuple[dict[str, str], dict[str, float], dict[str, list[dict]]]:
    """(predictions {id: text}, null odds {id: score}, n-best {id: entries}) from HF's
    outputs on encode's windows, by the run's own postprocessing (postprocess.predict: the
    same n_best_size, max_answer_length and original (config.squad_postprocess "original",
    the default) give the same predictions/)."""
    results = window_results(outputs, attention_mask)
    return postprocess.predict(
        list(questions),
        windows,
        results,
        n_best_size=n_best_size,
        max_answer_length=max_answer_length,
        original=original,
    )
