"""The SQuAD metric on hand-made cases, each expected figure worked out by the official
evaluate-v2.0 formulas in the comments; and the postprocessing that feeds it."""

import json

import numpy as np
import pytest

from xlnet_jax.finetune.squad import metric, postprocess
from xlnet_jax.finetune.squad.reading import Question
from xlnet_jax.finetune.squad.windows import Window


@pytest.mark.parametrize(
    "gold,prediction,exact,f1",
    [
        ("the Eiffel Tower", "Eiffel tower", 1, 1.0),  # articles and case go
        ("U.S. Army", "US army!", 1, 1.0),  # ASCII punctuation goes
        ("an  apple ", "apple", 1, 1.0),  # whitespace collapses
        ("the big red dog", "red dog barked", 0, 2 / 3),  # bags {big red dog} {red dog barked}
        ("dog dog cat", "dog", 0, 0.5),  # p = 1, r = 1/3: 2 * 1/3 / (4/3)
        ("Paris", "London", 0, 0.0),
        ("", "", 1, 1.0),  # no answer, none predicted
        ("", "London", 0, 0.0),
        ("北京大学", "北京", 0, 2 / 3),  # CJK: characters, p = 1, r = 1/2
        ("北京。", "北京", 1, 1.0),  # CJK punctuation goes too
        ("서울에서", "서울", 0, 2 / 3),  # Hangul by character
        # docs/squad.md's Korean particles: kept, each one character more
        ("서울", "서울에서", 0, 2 / 3),  # p = 2/4, r = 1
        ("철수", "철수는", 0, 0.8),  # p = 2/3, r = 1: 2 * 2/3 / (5/3)
        ("3월", "3월에", 0, 0.8),  # the digit is a character too
        ("것", "건", 0, 0.0),  # 것 + 은 contracted into one syllable
        ("서울에서", "서울 에서", 1, 1.0),  # spaces do not count
        ("Python 3 编程", "python 3编程", 1, 1.0),  # mixed: words and characters
    ],
)
def test_exact_and_f1(gold, prediction, exact, f1):
    assert metric.exact(gold, prediction) == exact
    assert metric.f1(gold, prediction) == pytest.approx(f1)


def test_a_question_scores_its_best_gold_answer():
    exact, f1 = metric.raw_scores({"q": ("Denver Broncos", "Broncos")}, {"q": "the Broncos"})
    assert exact == {"q": 1} and f1 == {"q": 1.0}
    # gold answers that normalise to nothing count as the no-answer ''
    exact, _ = metric.raw_scores({"q": ("the", "!")}, {"q": ""})
    assert exact == {"q": 1}


GOLDS = {"q1": ("Paris",), "q2": ("blue whale",), "q3": (), "q4": ()}
PREDICTIONS = {"q1": "Paris", "q2": "whale shark", "q3": "foo", "q4": "bar"}
NULL_ODDS = {"q1": -2.0, "q2": 0.5, "q3": 3.0, "q4": -1.0}


def test_threshold_and_its_search_as_the_official_script(tmp_path):
    for name, text in postprocess.prediction_files("dev", PREDICTIONS, NULL_ODDS, {}):
        (tmp_path / name).write_text(text)
    predictions = json.loads((tmp_path / "dev.json").read_text())
    null_odds = json.loads((tmp_path / "dev_null_odds.json").read_text())
    result = metric.evaluate(GOLDS, predictions, null_odds)
    # threshold 1.0: q1 right; q2 wrong (f1: bags {blue whale} {whale shark}: 1/2); q3 over
    # the threshold and unanswerable: right; q4 under it with a text: wrong.
    assert result["exact"] == 50.0 and result["f1"] == pytest.approx(100 * 2.5 / 4)
    assert result["HasAns_exact"] == 50.0 and result["HasAns_f1"] == pytest.approx(75.0)
    assert result["NoAns_exact"] == 50.0 and result["total"] == 4
    # search: all null scores 2 (q3, q4); by odds q1 +1 = 3 (best, at -2), q4 -1, q2 +0, q3 -1
    assert result["best_exact"] == 75.0 and result["best_exact_thresh"] == -2.0
    # f1: 2 +1 (q1) = 3 at -2, -1 (q4) = 2, +0.5 (q2) = 2.5, -1 (q3): best 3 at -2
    assert result["best_f1"] == 75.0 and result["best_f1_thresh"] == -2.0


def _written(tmp_path, predictions, null_odds):
    """The predictions and null odds as a run writes and the official script reads them."""
    for name, text in postprocess.prediction_files("dev", predictions, null_odds, {}):
        (tmp_path / name).write_text(text)
    return [json.loads((tmp_path / f"dev{s}.json").read_text()) for s in ("", "_null_odds")]


def test_when_all_null_wins_its_threshold_gives_it_back(tmp_path):
    """Every question null scores best (2 of 3); the official script reports threshold 0.0,
    which answers q1 and q2 (odds <= 0) and scores 1 of 3. The written threshold, applied to
    the written files, nulls all three."""
    golds = {"q1": ("Paris",), "q2": (), "q3": ()}
    predictions, null_odds = _written(
        tmp_path, {"q1": "London", "q2": "Rome", "q3": "Oslo"}, {"q1": -3.0, "q2": -1.0, "q3": 0.5}
    )
    result = metric.evaluate(golds, predictions, null_odds)
    assert result["best_f1"] == result["best_exact"] == pytest.approx(200 / 3)
    assert result["best_f1_thresh"] < min(null_odds.values())
    applied = metric.evaluate(golds, predictions, null_odds, result["best_f1_thresh"])
    assert applied["f1"] == pytest.approx(result["best_f1"])
    assert metric.evaluate(golds, predictions, null_odds, 0.0)["f1"] == pytest.approx(100 / 3)


def _official_find_best_thresh(predictions, scores, null_odds, has_answer):
    """evaluate-v2.0's find_best_thresh as its formulas read (written for this test)."""
    score = best = sum(1 for qid in has_answer if not has_answer[qid])
    thresh = 0.0
    for qid in sorted(null_odds, key=lambda k: null_odds[k]):
        score += scores[qid] if has_answer[qid] else -1 if predictions[qid] else 0
        if score > best:
            best, thresh = score, null_odds[qid]
    return 100.0 * best / len(scores), thresh


def test_the_searched_threshold_always_gives_its_score_back():
    """300 random dev sets (ties in the odds, all-null wins, the rest): each best_* applied
    at its threshold is the score; where the official threshold gives its score back (no
    ties, not all null), ours is the same threshold and score."""
    rng = np.random.default_rng(0)
    texts = ["Paris", "blue whale", "whale", ""]
    for _ in range(300):
        n = int(rng.integers(1, 8))
        golds = {f"q{i}": (str(rng.choice(texts[:3])),) if rng.random() < 0.5 else ()
                 for i in range(n)}  # fmt: skip
        predictions = {qid: str(rng.choice(texts)) for qid in golds}
        null_odds = {qid: float(rng.integers(-3, 3)) for qid in golds}
        result = metric.evaluate(golds, predictions, null_odds)
        exact, f1 = metric.raw_scores(golds, predictions)
        has_answer = {qid: bool(answers) for qid, answers in golds.items()}
        for kind, scores in (("exact", exact), ("f1", f1)):
            best, thresh = result[f"best_{kind}"], result[f"best_{kind}_thresh"]
            applied = metric.evaluate(golds, predictions, null_odds, thresh)
            assert applied[kind] == pytest.approx(best)
            official = _official_find_best_thresh(predictions, scores, null_odds, has_answer)
            untied = len(set(null_odds.values())) == n
            all_null = 100.0 * sum(not a for a in has_answer.values()) / n
            if untied and official[0] > all_null:
                assert (best, thresh) == pytest.approx(official)


def test_a_missing_prediction_is_one_line():
    with pytest.raises(ValueError, match="no prediction for 1 question.*q4"):
        metric.evaluate(GOLDS, {k: v for k, v in PREDICTIONS.items() if k != "q4"})


def _window(question, paragraph_len, max_context, char_start, char_end):
    n = paragraph_len + 4
    return Window(
        question=question,
        input_ids=np.zeros(n, np.int32),
        seg_ids=np.zeros(n, np.int32),
        p_mask=np.zeros(n, np.int32),
        paragraph_len=paragraph_len,
        cls_index=n - 1,
        start_position=-1,
        end_position=-1,
        is_impossible=0.0,
        char_start=np.array(char_start),
        char_end=np.array(char_end),
        max_context=np.array(max_context),
    )


def test_predictions_across_windows():
    context = "Ann met Bob in Rome."
    # pieces: Ann | met | Bob | in | Rome | . ; two windows over pieces 0-3 and 2-5
    starts, ends = [0, 4, 8, 12, 15, 19], [3, 7, 11, 14, 19, 20]
    question = Question("q", "Who?", context, 8, "Bob", ("Bob",), False)
    windows = [
        _window(0, 4, [True, True, True, False], starts[:4], ends[:4]),
        _window(0, 4, [False, True, True, True], starts[2:], ends[2:]),
    ]
    log = np.log
    results = [
        postprocess.WindowResult(  # best: "Bob in" (2, 3): -0.5 + -0.4; "Ann" (0, 0) 4 pieces long
            np.array([log(0.6), log(0.3)]),
            np.array([2, 0]),
            np.array([[log(0.67), log(0.2)], [log(0.5), log(0.1)]]),
            np.array([[3, 1], [0, 9]]),
            cls_logits=2.0,
        ),
        postprocess.WindowResult(  # start 0 is not max context here; (1, 2) "in Rome" valid
            np.array([log(0.9), log(0.5)]),
            np.array([0, 1]),
            np.array([[log(0.9), log(0.1)], [log(0.4), log(0.3)]]),
            np.array([[0, 1], [2, 0]]),
            cls_logits=-1.0,
        ),
    ]
    predictions, null_odds, nbest = postprocess.predict(
        [question], windows, results, n_best_size=3, max_answer_length=3
    )
    texts = [e["text"] for e in nbest["q"]]
    # window 1 (1, 2) "in Rome": 0.5 * 0.4 = 0.2; window 0 (2, 3) "Bob in": 0.6 * 0.67 = 0.40;
    # (0, 0) "Ann": 0.3 * 0.5 = 0.15; (2, 1) end < start; (0, 9) outside; window 1 start 0
    # ("Bob") is not max context there.
    assert texts == ["Bob in", "in Rome", "Ann"]
    assert predictions == {"q": "Bob in"}
    assert null_odds == {"q": -1.0}  # the smaller cls_logits of the two windows
    assert sum(e["probability"] for e in nbest["q"]) == pytest.approx(1.0)


def test_no_valid_span_still_predicts_text_or_empty():
    question = Question("q", "Who?", "Ann.", -1, "", (), True)
    window = _window(0, 1, [True], [0], [3])
    result = postprocess.WindowResult(
        np.array([0.0]), np.array([5]), np.array([[0.0]]), np.array([[5]]), cls_logits=4.0
    )
    predictions, null_odds, nbest = postprocess.predict(
        [question], [window], [result], n_best_size=2, max_answer_length=5
    )
    assert predictions == {"q": ""} and null_odds == {"q": 4.0}
    assert nbest["q"][0]["text"] == ""
