"""The official metrics of GLUE and RACE, computed from predictions and gold labels.

Each follows the definition the GLUE leaderboard and the original's run_classifier use
(there through scikit-learn and scipy): Matthews correlation (CoLA), F1 of the positive
class "1" with accuracy (MRPC, QQP; a generic classification of two classes: F1 of its
second class), Pearson and Spearman correlation (STS-B), accuracy (the rest; RACE per level
and over all). Written with numpy; tests compare them with independent computations (scipy
where it has the metric).
"""

from collections.abc import Sequence

import numpy as np


def accuracy(gold: Sequence, predicted: Sequence) -> float:
    """The fraction of predictions equal to the gold label."""
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    return float((gold == predicted).mean())


def _confusion(gold: Sequence, predicted: Sequence, positive) -> tuple[int, int, int, int]:
    g, p = np.asarray(gold) == positive, np.asarray(predicted) == positive
    return int((g & p).sum()), int((~g & ~p).sum()), int((~g & p).sum()), int((g & ~p).sum())


def matthews(gold: Sequence, predicted: Sequence, positive="1") -> float:
    """Matthews correlation of a binary task; 0 when a margin is empty (as scikit-learn)."""
    tp, tn, fp, fn = _confusion(gold, predicted, positive)
    denominator = np.sqrt(float(tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def f1(gold: Sequence, predicted: Sequence, positive="1") -> float:
    """F1 of the positive class; 0 when it is never predicted nor gold (as scikit-learn)."""
    tp, _, fp, fn = _confusion(gold, predicted, positive)
    return float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation coefficient."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / denominator) if denominator else float("nan")


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_x)) + 1]
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x), np.float64)
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's of the (tie-averaged) ranks."""
    return pearson(_ranks(np.asarray(x, np.float64)), _ranks(np.asarray(y, np.float64)))


# Metric sets by name: what a task reports on a labelled split.
def classification_metrics(
    kind: str, gold: Sequence, predicted: Sequence, positive="1"
) -> dict[str, float]:
    """kind "matthews" (CoLA), "f1_accuracy" (MRPC, QQP; a generic task of two classes) or
    "accuracy"; `positive` is the class whose F1 and Matthews correlation are reported."""
    if kind == "matthews":
        return {"matthews_corr": matthews(gold, predicted, positive)}
    if kind == "f1_accuracy":
        return {"f1": f1(gold, predicted, positive), "accuracy": accuracy(gold, predicted)}
    return {"accuracy": accuracy(gold, predicted)}


def regression_metrics(gold: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation (STS-B)."""
    return {"pearson": pearson(gold, predicted), "spearman": spearman(gold, predicted)}
