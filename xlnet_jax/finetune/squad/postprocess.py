"""Window outputs -> one answer per question, as the original's `write_predictions`.

For each question, every window proposes start_n_top x end_n_top spans; a span survives if
both ends lie in the paragraph, the start is in its max-context window, end >= start and it
is at most `max_answer_length` pieces long. The survivors, best first by start + end log
probability, give the n-best list with texts cut from the original paragraph by character
offsets (one entry per distinct text). The null odds are the smallest `cls_logits` over the
question's windows, and the threshold on them is what the metric searches.

original=True (config.squad_postprocess "original", the default) is run_squad's
write_predictions to the letter: a start or end at `>= paragraph_len - 1` is dropped
(:778-781, so the window's last paragraph piece never starts or ends an answer), and the
prediction is the first n-best entry (:842), even when its text is empty. original=False
("consistent") lets the last piece count (it is paragraph like the others) and predicts the
best non-empty text (an empty prediction is the no-answer the threshold decides, not a span).
"""

import dataclasses
import json
import math

import numpy as np

from xlnet_jax.finetune.squad.reading import Question
from xlnet_jax.finetune.squad.windows import Window


@dataclasses.dataclass(frozen=True)
class WindowResult:
    """The QA head's evaluation outputs for one window (the original's RawResult).

    Attributes:
      start_top_log_probs, start_top_index: [start_n_top].
      end_top_log_probs, end_top_index: [start_n_top, end_n_top], row i for start i.
      cls_logits: the answer-class logit (higher: no answer).
    """

    start_top_log_probs: np.ndarray
    start_top_index: np.ndarray
    end_top_log_probs: np.ndarray
    end_top_index: np.ndarray
    cls_logits: float


def _candidates(
    window: Window, result: WindowResult, max_answer_length: int, original: bool = False
):
    """(score, start log prob, end log prob, start, end) of the window's valid spans;
    original: the last paragraph piece is out, as run_squad's `>= paragraph_len - 1`."""
    limit = window.paragraph_len - 1 if original else window.paragraph_len
    for i, start in enumerate(result.start_top_index.tolist()):
        for j, end in enumerate(result.end_top_index[i].tolist()):
            if start >= limit or end >= limit:
                continue
            if not window.max_context[start] or end < start or end - start + 1 > max_answer_length:
                continue
            start_lp = float(result.start_top_log_probs[i])
            end_lp = float(result.end_top_log_probs[i, j])
            yield start_lp + end_lp, start_lp, end_lp, start, end


def _softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return [e / sum(exps) for e in exps]


def predict(
    questions: list[Question],
    windows: list[Window],
    results: list[WindowResult],
    *,
    n_best_size: int,
    max_answer_length: int,
    original: bool = False,
) -> tuple[dict[str, str], dict[str, float], dict[str, list[dict]]]:
    """(predictions {id: text}, null odds {id: score}, n-best {id: [entries]}), file order;
    original: run_squad's rules (module docstring)."""
    by_question: dict[int, list[tuple[Window, WindowResult]]] = {}
    for window, result in zip(windows, results, strict=True):
        by_question.setdefault(window.question, []).append((window, result))
    predictions, null_odds, nbest = {}, {}, {}
    for q, question in enumerate(questions):
        pairs = by_question.get(q, [])
        spans = sorted(
            (
                (*candidate, window)
                for window, result in pairs
                for candidate in _candidates(window, result, max_answer_length, original)
            ),
            key=lambda c: c[0],
            reverse=True,
        )
        entries, seen = [], set()
        for _, start_lp, end_lp, start, end, window in spans:
            if len(entries) >= n_best_size:
                break
            text = question.context[window.char_start[start] : window.char_end[end]].strip()
            if text in seen:
                continue
            seen.add(text)
            entries.append({"text": text, "start_log_prob": start_lp, "end_log_prob": end_lp})
        if not entries:
            entries.append({"text": "", "start_log_prob": -1e6, "end_log_prob": -1e6})
        probabilities = _softmax([e["start_log_prob"] + e["end_log_prob"] for e in entries])
        nbest[question.qid] = [
            {**e, "probability": p} for e, p in zip(entries, probabilities, strict=True)
        ]
        first = entries[0]["text"]
        predictions[question.qid] = (
            first if original else next((e["text"] for e in entries if e["text"]), "")
        )
        null_odds[question.qid] = min((float(r.cls_logits) for _, r in pairs), default=0.0)
    return predictions, null_odds, nbest


def prediction_files(
    split: str,
    predictions: dict[str, str],
    null_odds: dict[str, float],
    nbest: dict[str, list[dict]],
) -> list[tuple[str, str]]:
    """(name, json text) of <split>.json ({id: text}, what the official evaluate-v2.0 reads),
    <split>_null_odds.json ({id: score}, its --na-prob-file) and <split>_nbest.json ({id:
    the n-best entries}), as the original writes them."""
    files = (("", predictions), ("_null_odds", null_odds), ("_nbest", nbest))
    return [
        (f"{split}{suffix}.json", json.dumps(value, indent=2, ensure_ascii=False) + "\n")
        for suffix, value in files
    ]
