"""SQuAD json reading (versions, bad input) and the windows built from it."""

import json

import numpy as np
import pytest

from tests import multilingual
from xlnet_jax.data import normalize, tokenizer
from xlnet_jax.errors import ConfigError, DataError
from xlnet_jax.finetune.squad import offsets, reading, windows

CONTEXT = "Ann met Bob in Rome. They ate pasta near the old bridge."


def _qa(qid, question="Who met Bob?", text="Ann", start=0, **extra):
    answers = [{"text": text, "answer_start": start}] if text else []
    return {"id": qid, "question": question, "answers": answers, **extra}


def _write(tmp_path, qas, context=CONTEXT, **top):
    path = tmp_path / "train.json"
    data = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}], **top}
    path.write_text(json.dumps(data))
    return str(path)


def test_versions_told_from_the_data(tmp_path):
    v2 = _write(tmp_path, [_qa("a"), _qa("b", text="", is_impossible=True)])
    questions, version = reading.read_squad(v2)
    assert version == "2.0" and [q.is_impossible for q in questions] == [False, True]
    assert questions[0].answers == ("Ann",) and questions[1].answers == ()
    assert reading.read_squad(_write(tmp_path, [_qa("a")], version="1.1"))[1] == "1.1"
    assert reading.read_squad(_write(tmp_path, [_qa("a")], version="v2.0"))[1] == "2.0"
    unknown = _write(tmp_path, [_qa("a")], version="KorQuAD_v1.0_train")
    assert reading.read_squad(unknown)[1] == ""
    with pytest.raises(DataError, match="train.json: cannot tell.*squad_version=1.1 or 2.0"):
        reading.check_version(unknown, "", "")
    assert reading.check_version(unknown, "", "2.0") == "2.0"
    assert reading.read_squad(unknown, squad_version="1.1")[1] == "1.1"


BAD = [
    (_qa("x1", text="Bob", start=0), "question x1: answer_start 0 does not point at"),
    (_qa("x2", start=-1), "question x2: answer_start -1"),
    ({"question": "Who?", "answers": []}, r"data\[0\].paragraphs\[0\].qas\[1\]: .*no \"id\""),
    (_qa("a"), "question a: duplicate id"),
    (_qa("x3", text=""), "question x3: answerable but has no answers"),
]


@pytest.mark.parametrize("qa,message", BAD, ids=["start", "negative", "no_id", "dup", "none"])
def test_a_bad_question_is_one_line_naming_it(tmp_path, qa, message):
    path = _write(tmp_path, [_qa("a"), qa], version="1.1")
    with pytest.raises(DataError, match=message) as error:
        reading.read_squad(path)
    assert str(error.value).startswith(path) and "\n" not in str(error.value)


def test_an_empty_context_names_the_question(tmp_path):
    with pytest.raises(DataError, match="question a: its paragraph's context is empty"):
        reading.read_squad(_write(tmp_path, [_qa("a")], context="  ", version="1.1"))


def test_a_training_set_drops_bad_questions_with_a_count(tmp_path, capsys):
    qas = [_qa("a"), BAD[0][0], BAD[2][0], _qa("a"), _qa("b", "Where?", "Rome", 15)]
    questions, _ = reading.read_squad(_write(tmp_path, qas, version="1.1"), drop_bad=True)
    assert [q.qid for q in questions] == ["a", "b"]
    assert "dropped 3 bad question(s) of 5; first: question x1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    docs = multilingual.documents(("en",), 100)
    sentences = [normalize.normalize(s, uncased=False) for d in docs for s in d]
    sentences += [CONTEXT] * 5
    path = str(tmp_path_factory.mktemp("spm") / "spiece.model")
    tokenizer.train_tokenizer(sentences, path, 60)
    return tokenizer.load_processor(path)


def test_spans_and_max_context_as_the_original():
    # 10 pieces, room 4, stride 3: windows [0, 4) [3, 7) [6, 10)
    assert windows.spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert windows.spans(4, 4, 3) == [(0, 4)]
    best = windows.max_context(windows.spans(10, 4, 3), 10)
    # piece 3: window 0 score min(3, 0) + .04, window 1 min(0, 3) + .04: the first wins ties
    assert best[:, 3].tolist() == [True, False, False]
    # piece 5: window 1 only (min(2, 1))
    assert best[:, 5].tolist() == [False, True, False]
    # piece 6: window 1 min(3, 0), window 2 min(0, 3): the first again
    assert best[:, 6].tolist() == [False, True, False]
    assert (best.sum(axis=0) == 1).all()


def test_windows_layout_labels_and_masks(sp):
    config = windows.WindowConfig(seq_len=16, doc_stride=4, max_query_length=3, uncased=False)
    pieces = offsets.tokenize(sp, CONTEXT, uncased=False)
    answer_start = CONTEXT.index("pasta")
    questions = [
        reading.Question("a", "Who ate pasta near it?", CONTEXT, answer_start, "pasta", (), False),
        reading.Question("b", "Why?", CONTEXT, -1, "", (), True),
    ]
    train = windows.question_windows(sp, questions, config)
    query = offsets.tokenize(sp, questions[0].question, uncased=False).ids[:3]
    room = 16 - 3 - 3
    expected_spans = windows.spans(len(pieces.ids), room, 4)
    first_a = [w for w in train if w.question == 0]
    assert len(first_a) == len(expected_spans) > 2
    answer = pieces.covering(answer_start, answer_start + len("pasta"))
    for w, (start, length) in zip(first_a, expected_spans, strict=True):
        n = length + len(query) + 3
        np.testing.assert_array_equal(
            w.input_ids,
            [
                *pieces.ids[start : start + length],
                tokenizer.SEP_ID,
                *query,
                tokenizer.SEP_ID,
                tokenizer.CLS_ID,
            ],
        )
        assert list(w.seg_ids) == [0] * (length + 1) + [1] * (len(query) + 1) + [2]
        assert list(w.p_mask) == [0] * length + [1] * (len(query) + 2) + [0]
        assert w.cls_index == n - 1
        inside = start <= answer[0] and answer[1] < start + length
        if inside:
            assert (w.start_position, w.end_position) == (answer[0] - start, answer[1] - start)
            assert CONTEXT[w.char_start[w.start_position] : w.char_end[w.end_position]] == "pasta"
        else:
            assert w.start_position == w.end_position == w.cls_index and w.is_impossible == 1.0
    assert any(w.is_impossible == 0.0 for w in first_a)
    assert all(w.start_position == w.cls_index for w in train if w.question == 1)
    # every paragraph piece is max-context in exactly one window
    counts = np.zeros(len(pieces.ids), int)
    for w, (start, length) in zip(first_a, expected_spans, strict=True):
        counts[start : start + length] += w.max_context
    assert (counts == 1).all()
    batch = windows.batch(first_a[:2], 16)
    assert batch["input_ids"].shape == (2, 16)
    n = len(first_a[0].input_ids)
    assert (batch["input_mask"][0, :n] == 0).all() and (batch["input_mask"][0, n:] == 1).all()
    assert (batch["p_mask"][0, n:] == 1).all()


def test_windows_need_room_for_the_paragraph():
    with pytest.raises(ConfigError, match="seq_len 8 leaves no room"):
        windows.WindowConfig(seq_len=8, doc_stride=2, max_query_length=5, uncased=False).check()
