"""The official SQuAD 2.0 evaluation (evaluate-v2.0.py's formulas), CJK text by characters.

Answers are compared after the official normalisation: lowercase, ASCII punctuation removed,
the articles a/an/the removed, whitespace collapsed. EM is equality of the normalised texts,
F1 the overlap of their token bags, each the maximum over the gold answers; an unanswerable
question's only gold answer is ''. A question is predicted unanswerable when its null odds
exceed `na_prob_thresh` (the official default 1.0); `best_exact`/`best_f1` search the
threshold that maximises each (the official `find_best_thresh`, whose threshold here always
gives its score back: see `best_threshold`).

CJK rule (CMRC 2018's and KorQuAD's evaluations score characters): in a text holding any Han,
Hiragana, Katakana or Hangul character, each such character is one token, and all Unicode
punctuation is removed as well. Text without them is scored exactly as the official script.
"""

import collections
import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0002fa1f]"
)


def normalize_answer(text: str) -> str:
    """The official normalisation: lower, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    """The tokens F1 counts: the official whitespace tokens, or characters for CJK text."""
    if not text:
        return []
    if not _CJK.search(text):
        return normalize_answer(text).split()
    text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
    return _CJK.sub(lambda m: f" {m.group(0)} ", normalize_answer(text)).split()


def exact(gold: str, prediction: str) -> int:
    """1 when the normalised texts are equal (official compute_exact; CJK: same tokens)."""
    if _CJK.search(gold) or _CJK.search(prediction):
        return int(answer_tokens(gold) == answer_tokens(prediction))
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1(gold: str, prediction: str) -> float:
    """Official compute_f1: harmonic mean of token-bag precision and recall."""
    gold_tokens, predicted = answer_tokens(gold), answer_tokens(prediction)
    if not gold_tokens or not predicted:
        return float(gold_tokens == predicted)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(predicted)).values())
    if not same:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def raw_scores(
    golds: dict[str, tuple[str, ...]], predictions: dict[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """Per question (exact, f1), best over its gold answers (official get_raw_scores)."""
    exact_scores, f1_scores = {}, {}
    for qid, answers in golds.items():
        gold = [a for a in answers if normalize_answer(a)] or [""]
        prediction = predictions[qid]
        exact_scores[qid] = max(exact(a, prediction) for a in gold)
        f1_scores[qid] = max(f1(a, prediction) for a in gold)
    return exact_scores, f1_scores


def _thresholded(scores, null_odds, has_answer, thresh):
    """Official apply_no_ans_threshold: a question over the threshold scores 1 iff it has
    no answer."""
    return {
        qid: float(not has_answer[qid]) if null_odds[qid] > thresh else score
        for qid, score in scores.items()
    }


def best_threshold(
    predictions: dict[str, str],
    scores: dict[str, float],
    null_odds: dict[str, float],
    has_answer: dict[str, bool],
    original: bool = False,
) -> tuple[float, float]:
    """(best score in %, its threshold): the official find_best_thresh's search, with a
    threshold that gives the best score back when applied (null when the odds exceed it).

    original=True is the search of the original's squad_utils.find_best_thresh_v2 (and the
    official script's) to the letter: threshold 0.0 when every question null scores best,
    and a tie may be split. config.squad_postprocess "original" (the default) takes it, so
    best_exact and best_f1 are the figures the original reports.

    The search starts from every question null and answers the questions by null odds
    ascending; the threshold at a question's odds answers it and those below. Where the
    official threshold would not give its score back, this one differs:
    - every question null scores best: the official reports 0.0, which answers each question
      of odds <= 0 (XLNet's odds are logits, often negative); here it is the lowest odds
      less 1, which every question's odds exceed.
    - questions of equal odds are answered together (the official may stop inside a tie,
      at a score no threshold gives).
    """
    current = best = sum(1 for qid in has_answer if not has_answer[qid])
    ranked = sorted((qid for qid in null_odds if qid in scores), key=lambda k: null_odds[k])
    if original:
        thresh = 0.0
        for qid in ranked:
            current += scores[qid] if has_answer[qid] else -1 if predictions[qid] else 0
            if current > best:
                best, thresh = current, null_odds[qid]
        return 100.0 * best / len(scores), thresh
    thresh = null_odds[ranked[0]] - 1.0 if ranked else 0.0
    for i, qid in enumerate(ranked):
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        tied = i + 1 < len(ranked) and null_odds[ranked[i + 1]] == null_odds[qid]
        if current > best and not tied:
            best, thresh = current, null_odds[qid]
    return 100.0 * best / len(scores), thresh


def evaluate(
    golds: dict[str, tuple[str, ...]],
    predictions: dict[str, str],
    null_odds: dict[str, float] | None = None,
    na_prob_thresh: float = 1.0,
    original: bool = False,
) -> dict[str, float]:
    """The official evaluate-v2.0 output dict; with null_odds (its --na-prob-file) also the
    threshold search's best_exact, best_f1 and their thresholds.

    Args:
      golds: question id -> gold answer texts (() for an unanswerable question).
      predictions: question id -> predicted text, for every question.
      null_odds: question id -> no-answer score (higher: more likely unanswerable).
      na_prob_thresh: the official default 1.0.
      original: best_threshold's search as the original's (see there).
    """
    missing = [qid for qid in golds if qid not in predictions]
    if missing:
        raise ValueError(f"no prediction for {len(missing)} question(s), e.g. {missing[0]}")
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    searched = null_odds is not None
    null_odds = null_odds if searched else {qid: 0.0 for qid in golds}
    exact_raw, f1_raw = raw_scores(golds, predictions)
    exact_scores = _thresholded(exact_raw, null_odds, has_answer, na_prob_thresh)
    f1_scores = _thresholded(f1_raw, null_odds, has_answer, na_prob_thresh)

    def summary(qids: list[str], prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}exact": 100.0 * sum(exact_scores[k] for k in qids) / len(qids),
            f"{prefix}f1": 100.0 * sum(f1_scores[k] for k in qids) / len(qids),
            f"{prefix}total": len(qids),
        }

    out = summary(list(golds))
    if has := [qid for qid in golds if has_answer[qid]]:
        out |= summary(has, "HasAns_")
    if no := [qid for qid in golds if not has_answer[qid]]:
        out |= summary(no, "NoAns_")
    if not searched:
        return out
    best_exact, exact_thresh = best_threshold(
        predictions, exact_raw, null_odds, has_answer, original
    )
    best_f1, f1_thresh = best_threshold(predictions, f1_raw, null_odds, has_answer, original)
    out |= {
        "best_exact": best_exact,
        "best_exact_thresh": exact_thresh,
        "best_f1": best_f1,
        "best_f1_thresh": f1_thresh,
    }
    return out
