"""config.squad_postprocess "original": SQuAD's answers and threshold search as the
original's, against short transcriptions of its functions run on random cases.

  * run_squad write_predictions: starts and ends at >= paragraph_len - 1 dropped, the
    n-best list by start + end log probability, one entry per text, the prediction the
    first entry (empty or not), the null odds the smallest cls_logits.
  * squad_utils.find_best_thresh_v2: the threshold search, threshold 0.0 to start, ties not
    kept together.
"""

import math

import numpy as np

from xlnet_jax.finetune.squad import metric, postprocess
from xlnet_jax.finetune.squad.reading import Question
from xlnet_jax.finetune.squad.windows import Window

N_TOP = 3


def _original_predictions(windows, results, context, n_best_size, max_answer_length):
    """write_predictions for one question (the loop over its features), transcribed; the
    original's character offsets are inclusive (tok_end_to_orig_index = our char_end - 1)."""
    prelim, score_null = [], 1000000
    for feature_index, (feature, result) in enumerate(zip(windows, results, strict=True)):
        score_null = min(score_null, result.cls_logits)
        for i in range(N_TOP):
            for j in range(N_TOP):
                start_log_prob = result.start_top_log_probs[i]
                start_index = result.start_top_index[i]
                end_log_prob = result.end_top_log_probs[i, j]
                end_index = result.end_top_index[i, j]
                if start_index >= feature.paragraph_len - 1:
                    continue
                if end_index >= feature.paragraph_len - 1:
                    continue
                if not feature.max_context[start_index]:
                    continue
                if end_index < start_index:
                    continue
                if end_index - start_index + 1 > max_answer_length:
                    continue
                prelim.append((feature_index, start_index, end_index, start_log_prob, end_log_prob))
    prelim = sorted(prelim, key=lambda x: x[3] + x[4], reverse=True)
    seen, nbest = {}, []
    for feature_index, start_index, end_index, start_lp, end_lp in prelim:
        if len(nbest) >= n_best_size:
            break
        feature = windows[feature_index]
        start_orig_pos = feature.char_start[start_index]
        end_orig_pos = feature.char_end[end_index] - 1
        final_text = context[start_orig_pos : end_orig_pos + 1].strip()
        if final_text in seen:
            continue
        seen[final_text] = True
        nbest.append((final_text, start_lp, end_lp))
    if not nbest:
        nbest.append(("", -1e6, -1e6))
    best_non_null_entry = None
    for entry in nbest:
        if not best_non_null_entry:
            best_non_null_entry = entry
    return best_non_null_entry[0], score_null, [e[0] for e in nbest]


def _original_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """squad_utils.find_best_thresh_v2, transcribed (its has-answer average left out)."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def _random_question(rng, q: int):
    """A paragraph whose pieces are words or blanks (so a span's text may strip to empty),
    2 windows over it, and random top-k outputs for each, ties included."""
    pieces = [rng.choice(["ann", "bob", "  ", "cat", "dog"]) for _ in range(12)]
    context = "".join(pieces)
    starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    ends = starts + np.array([len(p) for p in pieces])
    windows, results = [], []
    for w in range(2):
        length = int(rng.integers(2, 8))
        offset = w * 4
        windows.append(Window(
            question=0, input_ids=np.zeros(length + 3, np.int32),
            seg_ids=np.zeros(length + 3, np.int32), p_mask=np.zeros(length + 3, np.int32),
            paragraph_len=length, cls_index=length + 2, start_position=0, end_position=0,
            is_impossible=0.0, char_start=starts[offset : offset + length],
            char_end=ends[offset : offset + length],
            max_context=rng.random(length) < 0.8,
        ))  # fmt: skip
        log_probs = np.round(rng.normal(size=(N_TOP, N_TOP)), 1)  # rounded: ties
        results.append(postprocess.WindowResult(
            start_top_log_probs=np.round(rng.normal(size=N_TOP), 1),
            start_top_index=rng.integers(0, length + 2, N_TOP),
            end_top_log_probs=log_probs,
            end_top_index=rng.integers(0, length + 2, (N_TOP, N_TOP)),
            cls_logits=float(np.round(rng.normal(), 1)),
        ))  # fmt: skip
    return Question(f"q{q}", "?", context, -1, "", (), True), windows, results


def test_predictions_equal_the_originals_write_predictions():
    rng = np.random.default_rng(0)
    differs = empty_first = 0
    for q in range(300):
        question, windows, results = _random_question(rng, q)
        kwargs = dict(n_best_size=4, max_answer_length=5)
        preds, odds, nbest = postprocess.predict([question], windows, results, original=True,
                                                 **kwargs)  # fmt: skip
        want, want_odds, want_nbest = _original_predictions(
            windows, results, question.context, **kwargs
        )
        assert preds[question.qid] == want
        assert math.isclose(odds[question.qid], want_odds)
        assert [e["text"] for e in nbest[question.qid]] == want_nbest
        ours, _, _ = postprocess.predict([question], windows, results, **kwargs)
        differs += ours[question.qid] != want
        empty_first += want == "" and any(want_nbest)
    assert differs > 10 and empty_first > 0  # the option matters, both of its rules show


def test_threshold_search_equals_the_originals_find_best_thresh_v2():
    rng = np.random.default_rng(1)
    differs = 0
    for _ in range(300):
        n = int(rng.integers(1, 12))
        qids = [f"q{i}" for i in range(n)]
        has = {k: bool(rng.random() < 0.5) for k in qids}
        preds = {k: "x" if rng.random() < 0.7 else "" for k in qids}
        scores = {k: float(rng.choice([0.0, 0.5, 1.0])) for k in qids}
        odds = {k: float(rng.choice([-1.0, -0.5, 0.0, 0.5])) for k in qids}  # many ties
        want = _original_best_thresh(preds, scores, odds, has)
        got = metric.best_threshold(preds, scores, odds, has, original=True)
        assert got == want
        differs += metric.best_threshold(preds, scores, odds, has) != want
    assert differs > 10
