"""Each task reads a small file written in its distribution's exact layout; bad input is one
line naming the file, the line and what was expected."""

import json

import pytest

from xlnet_jax.errors import DataError, MissingFileError
from xlnet_jax.finetune.registry import TASKS, get_task

# A few lines of each GLUE task as the GLUE distribution writes them (headers, columns).
MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
MNLI_DEV_HEADER = MNLI_HEADER.replace("label1\t", "label1\tlabel2\tlabel3\tlabel4\tlabel5\t")
STSB_HEADER = (
    "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
)
GLUE_FILES = {
    "cola": {
        "train.tsv": "gj04\t1\t\tOur friends won't buy this analysis.\n"
        "gj04\t0\t*\tThey drank the pub.\n",
        "dev.tsv": "gj04\t1\t\tThe sailors rode the breeze.\n",
        "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n",
    },
    "sst-2": {
        "train.tsv": "sentence\tlabel\nhide new secretions \t0\ngood fun \t1\n",
        "dev.tsv": "sentence\tlabel\nit 's a charming journey . \t1\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash of styles\n",
    },
    "mrpc": {
        "train.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        "1\t702876\t702977\tAmrozi accused his brother.\tHe accused his brother.\n",
        "dev.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\tA b.\tC d.\n",
        "test.tsv": "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\tA b.\tC d.\n",
    },
    "sts-b": {
        "train.tsv": f"{STSB_HEADER}\n0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t"
        "A plane is taking off.\tAn air plane is taking off.\t5.000\n",
        "dev.tsv": f"{STSB_HEADER}\n0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\t"
        "A man with a hard hat is dancing.\tA man wearing a hard hat is dancing.\t5.000\n",
        "test.tsv": STSB_HEADER.rsplit("\t", 1)[0] + "\n0\tmain-captions\tMSRvid\t2012test\t"
        "0024\tnone\tnone\tA girl is styling her hair.\tA girl is brushing her hair.\n",
    },
    "qqp": {
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "133273\t213221\t213222\tHow is the life?\tHow is life?\t0\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\tA?\tB?\t1\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWhy?\tHow?\n",
    },
    "mnli": {
        "train.tsv": f"{MNLI_HEADER}\n0\t31193\t31193n\tgovernment\t( x )\t( y )\t(ROOT x)\t"
        "(ROOT y)\tConceptually cream skimming has two dimensions.\tProduct and geography.\t"
        "neutral\tneutral\n",
        "dev_matched.tsv": f"{MNLI_DEV_HEADER}\n0\t63735\t63735n\tslate\tx\ty\tx\ty\t"
        "The new rights are nice.\tEveryone loves them.\tneutral\tentailment\tneutral\t"
        "neutral\tneutral\tneutral\n",
        "dev_mismatched.tsv": f"{MNLI_DEV_HEADER}\n0\t75290\t75290c\tletters\tx\ty\tx\ty\t"
        "Your contribution helped.\tIt did not help.\tcontradiction\tcontradiction\t"
        "contradiction\tcontradiction\tcontradiction\tcontradiction\n",
        "test_matched.tsv": MNLI_HEADER.rsplit("\t", 2)[0]
        + "\n0\t31493\t31493\ttravel\tx\ty\tx\ty\tHierbas is a drink.\tIt is sweet.\n",
    },
    "qnli": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat?\tThis.\tnot_entailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWho?\tShe.\tentailment\n",
        "test.tsv": "index\tquestion\tsentence\n0\tWhen?\tNow.\n",
    },
    "rte": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo weapons.\tWeapons.\t"
        "not_entailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana.\tDana.\tentailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tA.\tB.\n",
    },
    "wnli": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tThe pin stuck.\t1\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tIt is.\t0\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tA.\tB.\n",
    },
}
# (task, split, what its first example must read as: text_a, text_b, label)
FIRST = {
    "cola": ("Our friends won't buy this analysis.", None, "1"),
    "sst-2": ("hide new secretions ", None, "0"),
    "mrpc": ("Amrozi accused his brother.", "He accused his brother.", "1"),
    "sts-b": ("A plane is taking off.", "An air plane is taking off.", 5.0),
    "qqp": ("How is the life?", "How is life?", "0"),
    "mnli": (
        "Conceptually cream skimming has two dimensions.",
        "Product and geography.",
        "neutral",
    ),
    "qnli": ("What?", "This.", "not_entailment"),
    "rte": ("No weapons.", "Weapons.", "not_entailment"),
    "wnli": ("I stuck a pin.", "The pin stuck.", "1"),
}


def write(root, files: dict) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return str(root)


@pytest.mark.parametrize("name", sorted(GLUE_FILES))
def test_each_glue_task_reads_its_distribution_layout(tmp_path, name):
    task = get_task(name.upper())  # names are case-insensitive
    data_dir = write(tmp_path / name, GLUE_FILES[name])
    train = task.read(data_dir, "train")
    assert (train[0].text_a, train[0].text_b, train[0].label) == FIRST[name]
    assert train[0].where.endswith(":1" if name == "cola" else ":2")
    for split in task.eval_splits:
        assert all(e.label is not None for e in task.read(data_dir, split))
    test_split = task.test_splits[0]
    assert task.has_split(data_dir, test_split)
    test = task.read(data_dir, test_split)
    assert test[0].label is None and test[0].index == "0"
    record = {"index": "0", "prediction": 1.5 if name == "sts-b" else task.labels(data_dir)[0]}
    [(file_name, text)] = task.submission_files(test_split, [record])
    assert file_name.endswith(".tsv") and text.splitlines()[0] == "index\tprediction"


def test_mnli_evaluates_matched_and_mismatched():
    task = get_task("mnli")
    assert task.eval_splits == ("dev_matched", "dev_mismatched")
    assert task.submissions == {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}


def test_every_task_of_the_issue_is_registered():
    names = {"cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli", "race"}
    assert set(TASKS) == names | {"classification", "regression", "squad"}


def test_generic_tasks_read_label_text_lines(tmp_path):
    data_dir = write(
        tmp_path,
        {
            "train.tsv": "pos\tgood film\nneg\tbad film\npos\tfine\n",
            "dev.tsv": "neg\tawful\n",
            "test.tsv": "so so\n",
        },
    )
    task = get_task("classification")
    assert task.labels(data_dir) == ["neg", "pos"]
    assert [e.label for e in task.read(data_dir, "train")] == ["pos", "neg", "pos"]
    assert task.read(data_dir, "test")[0].text_a == "so so"
    pairs = write(tmp_path / "pairs", {"train.tsv": "0.5\ta\tb\n", "dev.tsv": "1.0\tc\td\n"})
    example = get_task("regression").read(pairs, "dev")[0]
    assert (example.label, example.text_a, example.text_b) == (1.0, "c", "d")


def race_article(**overrides) -> str:
    data = {
        "answers": ["B"],
        "options": [["a cat", "a dog", "a fish", "a bird"]],
        "questions": ["Tom has _ ."],
        "article": "Tom has a dog. It barks.",
        "id": "middle1.txt",
    }
    return json.dumps({**data, **overrides})


def race_dir(root, **overrides) -> str:
    for split in ("train", "dev", "test"):
        for level in ("middle", "high"):
            write(root / split / level, {f"{level}1.txt": race_article(**overrides)})
    return str(root)


def test_race_reads_the_release_layout(tmp_path):
    task = get_task("race")
    examples = task.read(race_dir(tmp_path), "dev")
    assert [e.level for e in examples] == ["middle", "high"]
    assert examples[0].label == 1 and examples[0].index == "middle/middle1.txt:0"
    assert task.has_split(str(tmp_path), "test")
    records = [{"prediction": "B"}, {"prediction": "A"}]
    assert task.metrics(examples, records) == {
        "accuracy": 0.5,
        "accuracy_middle": 1.0,
        "accuracy_high": 0.0,
    }


def _error(task_name: str, data_dir: str, split: str) -> str:
    with pytest.raises((DataError, MissingFileError)) as caught:
        get_task(task_name).read(data_dir, split)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_input_is_one_line_naming_file_line_and_expectation(tmp_path):
    glue = write(tmp_path / "sst2", GLUE_FILES["sst-2"])
    assert "dev.tsv: not found" in _error("sst-2", str(tmp_path / "nowhere"), "dev")
    (tmp_path / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\textra\n")
    assert "train.tsv:3: 3 tab-separated columns, expected 2" in _error("sst-2", glue, "train")
    (tmp_path / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\tpositive\n")
    message = _error("sst-2", glue, "train")
    assert "train.tsv:2: label 'positive' is not one of ['0', '1']" in message
    (tmp_path / "sst2" / "train.tsv").write_text("sentence\tlabel\n")
    assert "train.tsv: no data lines" in _error("sst-2", glue, "train")
    # another task's folder: its header's names, or its column count, say so
    rte = write(tmp_path / "rte", GLUE_FILES["rte"])
    assert "header column 4 is 'label', expected 'question1'" in _error("qqp", rte, "train")
    sst2 = write(tmp_path / "sst2b", GLUE_FILES["sst-2"])
    message = _error("cola", sst2, "train")
    assert "train.tsv:1: 2 tab-separated columns, expected 4 (for GLUE's CoLA train" in message
    message = _error("qnli", rte, "train")
    assert "header column 2 is 'sentence1', expected 'question'" in message
    assert "QNLI data" in message
    assert "train/middle: not found" in _error("race", glue, "train")
    generic = write(tmp_path / "generic", {"train.tsv": "a\tx\n", "dev.tsv": "b\ty\n"})
    assert "dev.tsv:1: label 'b' does not occur in train.tsv" in _error(
        "classification", generic, "dev"
    )
    bad_race = race_dir(tmp_path / "race", answers=["E"])
    assert "middle1.txt: answer 1 is 'E', expected one of A B C D" in _error(
        "race", bad_race, "dev"
    )
