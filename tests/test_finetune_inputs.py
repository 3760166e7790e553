"""What the fine-tuning readers guess, refuse, skip and count: the reading rule (lines end at
\\n, a BOM removed, non-UTF-8 bytes named by line and offset), the generic tasks' reports,
non-finite scores, GLUE's short lines, RACE's truncation and missing answers, SQuAD's numeric
ids and cut questions, and F1 beside accuracy for two classes. (tests/test_finetune_fuzz.py
throws many damaged files at the same readers.)"""

import json

import ml_collections
import numpy as np
import pytest

from tests.test_finetune_tasks import GLUE_FILES, race_article, write
from xlnet_jax.data import tokenizer
from xlnet_jax.errors import ConfigError, DataError
from xlnet_jax.finetune.features import SEG_A
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.squad import offsets, reading, windows
from xlnet_jax.finetune.text import TextEncoder

WORDS = "the cat dog sat on a mat and ran far away from home today".split()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> TextEncoder:
    """A 36-piece SentencePiece model of WORDS (XLNet's special pieces at their ids)."""
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(WORDS, 8)) for _ in range(500)]
    path = str(tmp_path_factory.mktemp("spm") / "spiece.model")
    tokenizer.train_tokenizer(sentences, path, 36)
    return TextEncoder(path)


def _refusal(task_name: str, data_dir, split: str) -> str:
    with pytest.raises(DataError) as caught:
        get_task(task_name).read(str(data_dir), split)
    assert "\n" not in str(caught.value)
    return str(caught.value)


# --- 1. the reading rule ---


def test_a_line_ends_at_newline_only(tmp_path):
    """U+0085, U+2028 and form feed are text, not line ends (str.splitlines ends a line at
    each: the file read one example too many, or refused at the wrong line)."""
    texts = ["a\x85b", "c\u2028d", "e\x0cf", "g\rh"]
    lines = "".join(f"{label}\t{text}\r\n" for label, text in zip("xyxy", texts, strict=True))
    data = write(tmp_path, {"train.tsv": lines, "dev.tsv": "x\tz\n"})
    examples = get_task("classification").read(data, "train")
    assert [e.text_a for e in examples] == texts
    assert [e.where.rsplit(":", 1)[1] for e in examples] == ["1", "2", "3", "4"]
    sst2 = dict(GLUE_FILES["sst-2"], **{"train.tsv": "sentence\tlabel\nfine\x85 film \t1\n"})
    assert get_task("sst-2").read(write(tmp_path / "sst2", sst2), "train")[0].text_a == (
        "fine\x85 film "
    )


def test_a_byte_order_mark_is_removed(tmp_path):
    """A BOM made a third label '\\ufeffneg' (a 3-way head trained without a word)."""
    data = write(tmp_path, {"train.tsv": "\ufeffneg\tbad\npos\tgood\n", "dev.tsv": "neg\tx\n"})
    assert get_task("classification").labels(data) == ["neg", "pos"]


def test_bytes_that_are_not_utf8_are_one_line_with_line_and_offset(tmp_path):
    """Not UTF-8: a 30-line UnicodeDecodeError traceback naming no file or line."""
    (tmp_path / "train.tsv").write_bytes(b"pos\tgood\nneg\tcaf\xe9 bad\n")
    (tmp_path / "dev.tsv").write_text("pos\tx\n")
    message = _refusal("classification", tmp_path, "train")
    assert f"{tmp_path / 'train.tsv'}:2: byte 0xe9 at byte offset 16 is not UTF-8" in message
    glue = write(tmp_path / "rte", GLUE_FILES["rte"])
    (tmp_path / "rte" / "dev.tsv").write_bytes(b"\xef\xbb\xbfindex\tsentence1\xff\n")
    assert "dev.tsv:1: byte 0xff at byte offset 18 is not UTF-8" in _refusal("rte", glue, "dev")


# --- 2. the generic tasks say what they guessed ---


def test_the_generic_tasks_print_labels_shape_and_empty_texts(tmp_path, capsys):
    data = write(
        tmp_path,
        {"train.tsv": "pos\tgood\tfilm\nneg\t \tbad\npos\tfine\tfilm\n", "dev.tsv": "neg\t\tx\n"},
    )
    task = get_task("classification")
    assert task.labels(data) == ["neg", "pos"]
    task.read(data, "train")  # read once: reported once
    task.read(data, "dev")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{tmp_path / 'train.tsv'}: 3 examples of pairs (LABEL<TAB>TEXT_A<TAB>TEXT_B); "
        "2 labels: neg 1, pos 2",
        f"{tmp_path / 'train.tsv'}: 1 empty text(s) in 3 lines, read as empty (first: line 2)",
        f"{tmp_path / 'dev.tsv'}: 1 empty text(s) in 1 lines, read as empty (first: line 1)",
    ]
    scores = write(tmp_path / "r", {"train.tsv": "0.5\ta\n-2\tb\n", "dev.tsv": "1\tc\n"})
    get_task("regression").read(scores, "train")
    assert "2 examples of single texts (LABEL<TAB>TEXT); scores from -2 to 0.5" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "train,expected",
    [
        ("label\ttext\npos\tgood\nneg\tbad\n", "train.tsv:1: label 'label' looks like a header"),
        (
            "sentiment\ttext\n" + "pos\tgood\nneg\tbad\n" * 5,
            "train.tsv:1: label 'sentiment' occurs only on this first line, every other label "
            "5 or more times: a header?",
        ),
        ("pos\tgood\t\nneg\tbad\t\n", "train.tsv: the third column is empty on every line"),
        ("pos\tgood\nneg\tbad\tfilm\n", "train.tsv:2: 3 tab-separated columns, expected 2"),
    ],
    ids=["label", "rare-first-label", "trailing-tabs", "shape"],
)
def test_the_generic_tasks_refuse_a_header_and_another_shape(tmp_path, train, expected):
    """Old main: the header was a class of its own, trailing tabs made every row a pair."""
    data = write(tmp_path, {"train.tsv": train, "dev.tsv": "pos\tx\n"})
    assert expected in _refusal("classification", data, "train")


def test_a_header_in_dev_or_test_is_refused(tmp_path):
    """Old main scored dev's header as an example."""
    # 'label' off line 1 is a label like any other
    data = write(tmp_path, {"train.tsv": "pos\tgood\nlabel\tbad\n", "dev.tsv": "label\tt\n"})
    assert "dev.tsv:1: label 'label' looks like a header" in _refusal("classification", data, "dev")
    (tmp_path / "test.tsv").write_text("text\nfine\n")
    assert "test.tsv:1: ['text'] looks like a header" in _refusal("classification", data, "test")
    (tmp_path / "train.tsv").write_text("score\ttext\n1.0\tgood\n")
    message = _refusal("regression", data, "train")
    assert "train.tsv:1: score 'score' is not a number; a header?" in message


# --- 3. non-finite numbers are refused where they are read ---


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-Infinity"])
def test_non_finite_scores_and_labels_are_refused_with_their_line(tmp_path, value):
    """Old main trained on a nan score (the step skipped as non-finite, nothing printed)."""
    data = write(tmp_path, {"train.tsv": f"1.0\ta\n{value}\tb\n", "dev.tsv": f"2\tc\n{value}\td\n"})
    assert f"train.tsv:2: score '{value}' is not a finite number" in _refusal(
        "regression", data, "train"
    )
    (tmp_path / "train.tsv").write_text("1.0\ta\n")
    assert f"dev.tsv:2: score '{value}' is not a finite number" in _refusal(
        "regression", data, "dev"
    )
    (tmp_path / "train.tsv").write_text(f"pos\ta\n{value}\tb\n")
    assert f"train.tsv:2: label '{value}' is not a finite number" in _refusal(
        "classification", data, "train"
    )
    stsb = GLUE_FILES["sts-b"]["train.tsv"].replace("\t5.000\n", f"\t{value}\n")
    glue = write(tmp_path / "stsb", {"train.tsv": stsb})
    assert f"train.tsv:2: score '{value}' is not a finite number (STS-B)" in _refusal(
        "sts-b", glue, "train"
    )


# --- issue 51: GLUE's short lines, generic F1, numeric SQuAD ids ---


def test_glue_skips_a_short_line_with_a_count_as_the_original(tmp_path, capsys):
    """Old main aborted on the first short line (the original's processors skip it)."""
    train = GLUE_FILES["qnli"]["train.tsv"] + "1\tWhere?\n2\tWhy?\tBecause.\tentailment\n3\n"
    data = write(tmp_path, dict(GLUE_FILES["qnli"], **{"train.tsv": train}))
    examples = get_task("qnli").read(data, "train")
    assert [e.text_a for e in examples] == ["What?", "Why?"]
    assert f"{tmp_path / 'train.tsv'}: skipped 2 line(s) with fewer than 4 tab-separated " in (
        capsys.readouterr().err
    )
    (tmp_path / "train.tsv").write_text("index\tquestion\tsentence\tlabel\n1\tWhere?\n")
    message = _refusal("qnli", data, "train")
    assert "train.tsv:2: 2 tab-separated columns, expected 4 (as the header), and so every" in (
        message
    )


def test_two_class_generic_tasks_report_f1_beside_accuracy(tmp_path):
    data = write(tmp_path, {"train.tsv": "pos\ta\nneg\tb\n", "dev.tsv": "pos\ta\nneg\tb\n"})
    task = get_task("classification")
    task.labels(data)
    dev = task.read(data, "dev")
    predictions = [{"prediction": "pos"}, {"prediction": "pos"}]
    # "pos" is the second label in sorted order: tp 1, fp 1, fn 0 -> F1 2/3
    assert task.metrics(dev, predictions) == {"f1": pytest.approx(2 / 3), "accuracy": 0.5}
    three = write(tmp_path / "3", {"train.tsv": "a\tx\nb\ty\nc\tz\n", "dev.tsv": "a\tx\n"})
    task = get_task("classification")
    task.labels(three)
    assert task.metrics(task.read(three, "dev"), [{"prediction": "a"}]) == {"accuracy": 1.0}


def test_numeric_squad_ids_are_read_as_strings(tmp_path):
    """Old main called a numeric id missing."""
    qas = [{"id": 7, "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}]}]
    data = {"version": "1.1", "data": [{"paragraphs": [{"context": "Ann met Bob.", "qas": qas}]}]}
    (tmp_path / "train.json").write_text(json.dumps(data))
    questions, _ = reading.read_squad(str(tmp_path / "train.json"))
    assert questions[0].qid == "7"
    qas[0]["id"] = True
    (tmp_path / "train.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r'qas\[0\]: question has no "id"'):
        reading.read_squad(str(tmp_path / "train.json"))


# --- 5. no silent truncation of what decides the answer ---


def _race_config(seq_len: int, max_qa_length: int) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {"seq_len": seq_len, "num_segments": 1, "max_qa_length": max_qa_length}
    )


def test_race_keeps_article_in_every_row_or_refuses(tmp_path, encoder, capsys):
    """Old main: a question and option longer than seq_len cut the article out, silently."""
    question = "the cat sat on a mat and ran far away from home today _"
    article = race_article(questions=[question], article="the dog sat on a mat " * 4)
    for split in ("train", "dev"):
        write(tmp_path / split / "middle", {"1.txt": article})
        write(tmp_path / split / "high", {"1.txt": article})
    task = get_task("race")
    examples = task.read(str(tmp_path), "train")
    with pytest.raises(ConfigError, match="config.max_qa_length: 16 leaves no room for the "):
        task.featurize(examples, encoder, _race_config(16, 16), [])
    features = task.featurize(examples, encoder, _race_config(16, 8), [])
    seg = features.arrays["seg_ids"]  # [N, S, options, L]: the article and its <sep> are A
    assert ((seg == SEG_A).sum(axis=-1) >= 2).all()
    err = capsys.readouterr().err
    assert "RACE: max_qa_length 8 cut the question and option of 8 of 8 rows (longest" in err
    assert "RACE: the article was cut to fit seq_len 16 x num_segments 1 in 8 of 8 rows" in err


def test_race_says_when_a_split_has_no_answers(tmp_path, capsys):
    """Old main: a dev split without answers reported no metric and exited 0, silently."""
    unanswered = json.loads(race_article())
    del unanswered["answers"]
    for level in ("middle", "high"):
        write(tmp_path / "dev" / level, {"1.txt": json.dumps(unanswered)})
        write(tmp_path / "train" / level, {"1.txt": json.dumps(unanswered)})
    task = get_task("race")
    assert [e.label for e in task.read(str(tmp_path), "dev")] == [None, None]
    assert "dev: no question has an answer: predictions only, no accuracy" in (
        capsys.readouterr().err
    )
    message = _refusal("race", tmp_path, "train")
    assert "train: 2 of 2 questions have no answer (first: middle/1.txt:0); training needs" in (
        message
    )
    write(tmp_path / "dev" / "high", {"1.txt": race_article()})
    assert "dev: 1 of 2 questions have no answer" in _refusal("race", tmp_path, "dev")


def test_squad_counts_questions_cut_by_max_query_length(encoder, capsys):
    """Old main cut a question's end (a Korean question word: 27% of dev) without a word."""
    sp = tokenizer.load_processor(encoder.model_path)
    context = "the cat sat on a mat and ran far away"
    questions = [
        reading.Question("long", "the dog ran far away from home today", context, 0, "the",
                         ("the",), False),
        reading.Question("short", "the cat", context, 0, "the", ("the",), False),
    ]  # fmt: skip
    config = windows.WindowConfig(seq_len=24, doc_stride=4, max_query_length=3, uncased=False)
    windows.question_windows(sp, questions, config)
    longest = len(offsets.tokenize(sp, questions[0].question, uncased=False).ids)
    assert capsys.readouterr().err.strip() == (
        f"SQuAD: max_query_length 3 cut 1 of 2 questions to their first pieces (longest "
        f"{longest} pieces; first: question long); raise --config.max_query_length to keep "
        "them whole"
    )
