"""Every --task_name through `xlnet-jax finetune`, on small files laid out as the benchmark
distributes them: GLUE's train/dev/test TSVs with their headers and column counts (CoLA's
train and dev without one, MNLI's matched and mismatched dev and test files, STS-B's ten
columns, test files with an index column and no label), RACE's SPLIT/LEVEL/ARTICLE.txt json
folders, SQuAD 2.0's json, and the generic tasks' LABEL<TAB>TEXT lines.

Each run is 2 steps of a tiny model from random weights; the test checks what a user reads
afterwards: eval_results.json with the task's metric names (accuracy recomputed from the
predictions and the gold labels), predictions/SPLIT.jsonl with one line per example in file
order, the submission files a leaderboard or the official script takes, and that rerunning
the finished run changes no file (no step redone, nothing lost). The layouts are written
here from the distributions, not from the readers, so a reader that departs from them fails.
Every task shares one model shape, seq_len and batch, so a head's train and eval steps
compile once and later tasks with that head load them from the module's compilation cache.
"""

import dataclasses
import json
import math
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from unittest import mock

import jax
import numpy as np
import pytest

from tests import finetune_source
from xlnet_jax import cli
from xlnet_jax.finetune.registry import TASKS

REPO = pathlib.Path(__file__).resolve().parents[1]
WORDS = "river mountain forest lake engine wheel motor gear the a is here and".split()
VOCAB = 40  # what SentencePiece can build from WORDS
TINY = dict(d_model=32, n_layer=1, n_head=2, d_head=16, d_inner=64)  # 1 layer: compiles faster
FLAGS = [
    f"--config={REPO / 'configs' / 'finetune' / 'cpu.py'}",
    "--config.seq_len=32",
    "--config.batch_size=8",  # one row per simulated device
    "--config.num_train_steps=2",
    "--config.warmup_steps=1",
    "--config.checkpoint_every=2",
    "--config.log_every=2",
    "--config.dropout=0",  # dropout's random bits take most of the step's compile time
    "--config.dropatt=0",
    "--config.max_qa_length=12",  # RACE
    "--config.doc_stride=8",  # SQuAD
    "--config.max_query_length=8",
    "--config.max_answer_length=4",
    "--random_weights",
]
BINARY = ("0", "1")
ENTAILMENT = ("entailment", "not_entailment")


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, rng.integers(3, 8)))


@dataclasses.dataclass
class Expected:
    """What a task's run must leave.

    metrics: eval split -> the metric names of eval_results.json (besides "loss").
    indices: every predicted split -> its examples' indices in file order.
    gold: eval split -> the gold labels in file order (accuracy is recomputed from them).
    labels: what a prediction may be (() a float score, None any text).
    submissions: file name -> the split whose predictions it holds.
    """

    metrics: dict[str, set[str]]
    indices: dict[str, list[str]]
    gold: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    labels: tuple[str, ...] | None = ()
    submissions: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Glue:
    """A GLUE task's files as its distribution has them.

    header/row: train's header (None: none) and a line's fields from (index, a, b, label);
    dev_header/dev_row the same for the dev files where they differ (MNLI's five annotator
    labels); test_header/test_row a test file's (index, a, b).
    devs: dev file stems; tests: test file stem -> the leaderboard's submission file.
    single: one text a line (CoLA, SST-2), else a pair.
    """

    header: tuple[str, ...] | None
    row: Callable[[int, str, str, str], list[str]]
    test_header: tuple[str, ...]
    test_row: Callable[[int, str, str], list[str]]
    labels: tuple[str, ...]
    metrics: set[str]
    tests: dict[str, str]
    devs: tuple[str, ...] = ("dev",)
    dev_header: tuple[str, ...] | None = None
    dev_row: Callable[[int, str, str, str], list[str]] | None = None
    single: bool = False


def _pair(header: tuple[str, ...], test_header: tuple[str, ...], labels, submission: str):
    """QNLI, RTE and WNLI: index, text a, text b, label; their test files without the label."""
    return Glue(
        header, lambda i, a, b, label: [str(i), a, b, label],
        test_header, lambda i, a, b: [str(i), a, b],
        labels, {"accuracy"}, {"test": submission},
    )  # fmt: skip


_MNLI_HEAD = (
    "index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
    "sentence1_parse", "sentence2_parse", "sentence1", "sentence2",
)  # fmt: skip
_STSB_HEAD = (
    "index", "genre", "filename", "year", "old_index", "source1", "source2",
    "sentence1", "sentence2",
)  # fmt: skip


def _mnli_row(i: int, a: str, b: str) -> list[str]:
    parse = [f"( {a} )", f"( {b} )", f"(ROOT (S {a}))", f"(ROOT (S {b}))"]
    return [str(i), str(31193 + i), f"{31193 + i}n", "government", *parse, a, b]


GLUE = {
    "cola": Glue(
        None, lambda i, a, b, label: ["gj04", label, "" if label == "1" else "*", a],
        ("index", "sentence"), lambda i, a, b: [str(i), a],
        BINARY, {"matthews_corr"}, {"test": "CoLA.tsv"}, single=True,
    ),
    "sst-2": Glue(
        ("sentence", "label"), lambda i, a, b, label: [a + " ", label],  # SST-2's space
        ("index", "sentence"), lambda i, a, b: [str(i), a + " "],
        BINARY, {"accuracy"}, {"test": "SST-2.tsv"}, single=True,
    ),
    "mrpc": Glue(
        ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        lambda i, a, b, label: [label, str(702876 + i), str(702977 + i), a, f'"{b}" here'],
        ("index", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        lambda i, a, b: [str(i), str(1089874 + i), str(1089925 + i), a, b],
        BINARY, {"f1", "accuracy"}, {"test": "MRPC.tsv"},
    ),
    "sts-b": Glue(
        (*_STSB_HEAD, "score"),
        lambda i, a, b, label: [str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}",
                                "none", "none", a, b, label],
        _STSB_HEAD,
        lambda i, a, b: [str(i), "main-news", "headlines", "2016", f"{i:04d}", "none",
                         "none", a, b],
        (), {"pearson", "spearman"}, {"test": "STS-B.tsv"},
    ),
    "qqp": Glue(
        ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
        lambda i, a, b, label: [str(133273 + i), str(2 * i + 1), str(2 * i + 2), a, b, label],
        ("id", "question1", "question2"), lambda i, a, b: [str(i), a, b],
        BINARY, {"f1", "accuracy"}, {"test": "QQP.tsv"},
    ),
    "mnli": Glue(
        (*_MNLI_HEAD, "label1", "gold_label"),
        lambda i, a, b, label: [*_mnli_row(i, a, b), label, label],
        _MNLI_HEAD, lambda i, a, b: _mnli_row(i, a, b),
        ("contradiction", "entailment", "neutral"), {"accuracy"},
        {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
        devs=("dev_matched", "dev_mismatched"),
        dev_header=(*_MNLI_HEAD, "label1", "label2", "label3", "label4", "label5", "gold_label"),
        dev_row=lambda i, a, b, label: [*_mnli_row(i, a, b), *[label] * 5, label],
    ),
    "qnli": _pair(("index", "question", "sentence", "label"), ("index", "question", "sentence"),
                  ENTAILMENT, "QNLI.tsv"),
    "rte": _pair(("index", "sentence1", "sentence2", "label"),
                 ("index", "sentence1", "sentence2"), ENTAILMENT, "RTE.tsv"),
    "wnli": _pair(("index", "sentence1", "sentence2", "label"),
                  ("index", "sentence1", "sentence2"), BINARY, "WNLI.tsv"),
}  # fmt: skip


def _write_tsv(path: pathlib.Path, header: tuple[str, ...] | None, rows: list[list[str]]) -> None:
    lines = ([header] if header else []) + rows
    path.write_text("".join("\t".join(line) + "\n" for line in lines), encoding="utf-8")


def write_glue(root: pathlib.Path, name: str, rng: np.random.Generator) -> Expected:
    """train (8 lines), each dev file (5) and each test file (3) of a GLUE task."""
    spec = GLUE[name]

    def label() -> str:
        return f"{rng.uniform(0, 5):.3f}" if not spec.labels else str(rng.choice(spec.labels))

    def gold_rows(row, count: int) -> tuple[list[list[str]], list[str]]:
        labels = [label() for _ in range(count)]
        texts = [(_text(rng), "" if spec.single else _text(rng)) for _ in range(count)]
        pairs = zip(texts, labels, strict=True)
        return [row(i, a, b, y) for i, ((a, b), y) in enumerate(pairs)], labels

    expected = Expected(
        {}, {}, labels=spec.labels, submissions={v: k for k, v in spec.tests.items()}
    )
    _write_tsv(root / "train.tsv", spec.header, gold_rows(spec.row, 8)[0])
    for dev in spec.devs:
        rows, labels = gold_rows(spec.dev_row or spec.row, 5)
        _write_tsv(root / f"{dev}.tsv", spec.dev_header or spec.header, rows)
        expected.metrics[dev], expected.gold[dev] = spec.metrics, labels
        expected.indices[dev] = [str(i) for i in range(5)]
    for test in spec.tests:
        rows = [spec.test_row(i, _text(rng), _text(rng)) for i in range(3)]
        _write_tsv(root / f"{test}.tsv", spec.test_header, rows)
        expected.indices[test] = [row[0] for row in rows]
    return expected


def write_generic(root: pathlib.Path, name: str, rng: np.random.Generator) -> Expected:
    """`classification`: LABEL<TAB>A<TAB>B lines of three labels; `regression`:
    SCORE<TAB>TEXT lines. test.tsv: the texts alone."""
    labels = ("land", "machine", "water") if name == "classification" else ()

    def lines(count: int, labelled: bool) -> tuple[list[list[str]], list[str]]:
        gold = [str(rng.choice(labels)) if labels else f"{rng.normal():.2f}" for _ in range(count)]
        texts = [[_text(rng), _text(rng)] if labels else [_text(rng)] for _ in range(count)]
        return [[y, *t] if labelled else t for y, t in zip(gold, texts, strict=True)], gold

    rows, _ = lines(8, True)
    for row, label in zip(rows, labels, strict=False):  # every class in train
        row[0] = label
    _write_tsv(root / "train.tsv", None, rows)
    rows, gold = lines(5, True)
    _write_tsv(root / "dev.tsv", None, rows)
    _write_tsv(root / "test.tsv", None, lines(3, False)[0])
    metrics = {"accuracy"} if labels else {"pearson", "spearman"}
    indices = {"dev": [str(i) for i in range(5)], "test": [str(i) for i in range(3)]}
    return Expected({"dev": metrics}, indices, {"dev": gold}, labels)


def write_race(root: pathlib.Path, name: str, rng: np.random.Generator) -> Expected:
    """RACE/{train,dev,test}/{middle,high}/N.txt, one article's json each, as the release
    (the test split has answers too): two articles per level in train, one in dev and test."""
    del name
    expected = Expected({}, {}, labels=("A", "B", "C", "D"))
    for split, files in (("train", ("7.txt", "12.txt")), ("dev", ("3.txt",)), ("test", ("5.txt",))):
        indices, gold = [], []
        for level in ("middle", "high"):
            (root / split / level).mkdir(parents=True)
            for file in sorted(files):
                answers = [str(rng.choice(list("ABCD"))) for _ in range(2)]
                article = {
                    "answers": answers,
                    "options": [[_text(rng) for _ in range(4)] for _ in range(2)],
                    "questions": [f"{_text(rng)} _ here", f"{_text(rng)} ?"],
                    "article": ". ".join(_text(rng) for _ in range(4)),
                    "id": f"{level}{file}",
                }
                (root / split / level / file).write_text(json.dumps(article))
                indices += [f"{level}/{file}:{q}" for q in range(2)]
                gold += answers
        if split != "train":
            expected.indices[split], expected.gold[split] = indices, gold
            expected.metrics[split] = {"accuracy", "accuracy_middle", "accuracy_high"}
    return expected


SQUAD_METRICS = {
    f"{prefix}{name}" for prefix in ("", "HasAns_", "NoAns_") for name in ("exact", "f1", "total")
} | {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}


def write_squad(root: pathlib.Path, name: str, rng: np.random.Generator) -> Expected:
    """train-v2.0.json and dev-v2.0.json as SQuAD 2.0 ships them: articles of paragraphs of
    questions; an unanswerable question has is_impossible, no answers and plausible_answers;
    dev questions have several (repeated) gold answers."""
    del name

    def article(count: int, dev: bool) -> tuple[dict, list[str]]:
        paragraphs, ids = [], []
        for p in range(count):
            words = [str(w) for w in rng.choice(WORDS, 14)]
            context = " ".join(words)
            start = len(" ".join(words[:5])) + 1
            answer = {"text": " ".join(words[5:7]), "answer_start": start}
            qas = []
            for q in range(3):
                qid = f"5a8d7bf7df8bba001a0f9{'d' if dev else 't'}{p}{q}"
                question = {"question": _text(rng), "id": qid}
                if q == 2:
                    question |= {"answers": [], "is_impossible": True,
                                 "plausible_answers": [answer]}  # fmt: skip
                else:
                    question |= {"answers": [answer] * (3 if dev else 1), "is_impossible": False}
                qas.append(question)
                ids.append(qid)
            paragraphs.append({"qas": qas, "context": context})
        return {"title": "Normans", "paragraphs": paragraphs}, ids

    train, _ = article(3, dev=False)
    (root / "train-v2.0.json").write_text(json.dumps({"version": "v2.0", "data": [train]}))
    dev, ids = article(2, dev=True)
    (root / "dev-v2.0.json").write_text(json.dumps({"version": "v2.0", "data": [dev]}))
    files = {f"predictions/dev{suffix}.json": "dev" for suffix in ("", "_null_odds", "_nbest")}
    return Expected({"dev": SQUAD_METRICS}, {"dev": ids}, labels=None, submissions=files)


WRITERS: dict[str, Callable[[pathlib.Path, str, np.random.Generator], Expected]] = {
    **dict.fromkeys(GLUE, write_glue),
    "race": write_race,
    "classification": write_generic,
    "regression": write_generic,
    "squad": write_squad,
}
BY_PROCESS = "mnli"  # the task run as a real process of the console script


@pytest.fixture(scope="module", autouse=True)
def compilation_cache():
    """The test run's compilation cache: each head's steps compile once for all its tasks."""
    with finetune_source.run_compilation_cache():
        yield


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> pathlib.Path:
    """An HF directory of a 1 x 32 XLNet (zero weights) and a 40-piece tokenizer of WORDS."""
    rng = np.random.default_rng(0)
    texts = [_text(rng) for _ in range(2000)]
    root = tmp_path_factory.mktemp("source")
    return finetune_source.write_source(root, texts, VOCAB, TINY, scale=0.0)


def finetune(argv: list[str], *, process: bool) -> None:
    """`xlnet-jax finetune ARGV`, in this process or as the console script's own process
    (the cache, matmul precision and device count of this one, so it compiles the same)."""
    if not process:
        with mock.patch.object(sys, "argv", ["xlnet-jax", *argv]):  # config_flags reads it
            assert cli.main(argv) == 0
        return
    script = pathlib.Path(sys.executable).with_name("xlnet-jax")
    precision = jax.config.jax_default_matmul_precision
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_DEFAULT_MATMUL_PRECISION": precision}
    done = subprocess.run([str(script), *argv], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def snapshot(workdir: pathlib.Path) -> dict[str, bytes]:
    """Every file of a run directory (its lock too), by relative path."""
    return {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}


def check_predictions(workdir: pathlib.Path, split: str, expected: Expected) -> list[dict]:
    """predictions/SPLIT.jsonl: one record per example in file order, each a valid answer."""
    lines = (workdir / "predictions" / f"{split}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [str(r["index"]) if expected.labels is not None else r["id"] for r in records] == (
        expected.indices[split]
    )
    for record in records:
        value = record["prediction"]
        if expected.labels is None:
            assert isinstance(value, str)
        elif expected.labels:
            assert value in expected.labels
        else:
            assert isinstance(value, float) and math.isfinite(value)
    return records


def check_submission(workdir: pathlib.Path, name: str, records: list[dict], squad: bool) -> None:
    """A GLUE submission (index<TAB>prediction, the test file's indices) or SQuAD's json
    files ({id: value} in file order), each agreeing with predictions/."""
    text = (workdir / name).read_text()
    if squad:
        key = {"": "prediction", "_null_odds": "null_odds", "_nbest": "nbest"}
        field = key[name.removeprefix("predictions/dev").removesuffix(".json")]
        assert json.loads(text) == {r["id"]: r[field] for r in records}
        assert list(json.loads(text)) == [r["id"] for r in records]
        return
    lines = [line.split("\t") for line in text.splitlines()]
    assert lines[0] == ["index", "prediction"]
    assert [line[0] for line in lines[1:]] == [str(r["index"]) for r in records]
    for (_, value), record in zip(lines[1:], records, strict=True):
        if isinstance(record["prediction"], float):
            assert float(value) == pytest.approx(record["prediction"], abs=1e-6)
        else:
            assert value == record["prediction"]


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_name_through_the_command(name, source, tmp_path):
    assert set(WRITERS) == set(TASKS), "a task name without its official layout here"
    data, workdir = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    expected = WRITERS[name](data, name, np.random.default_rng(len(name)))
    argv = ["finetune", f"--task_name={name.upper()}", f"--data_dir={data}",
            f"--init_from={source}", f"--workdir={workdir}", *FLAGS]  # fmt: skip
    finetune(argv, process=name == BY_PROCESS)

    results = json.loads((workdir / "eval_results.json").read_text())
    assert results.pop("step") == 2
    assert {split: set(values) for split, values in results.items()} == {
        split: metrics | {"loss"} for split, metrics in expected.metrics.items()
    }
    for split in expected.indices:
        records = check_predictions(workdir, split, expected)
        values = results.get(split, {})
        assert all(math.isfinite(v) for v in values.values()), values
        if "accuracy" in values:
            predicted = [r["prediction"] for r in records]
            assert values["accuracy"] == pytest.approx(
                np.mean(np.array(predicted) == np.array(expected.gold[split]))
            )
    for file, split in expected.submissions.items():
        records = check_predictions(workdir, split, expected)
        check_submission(workdir, file, records, squad=name == "squad")
    assert {p.name for p in workdir.glob("*.tsv")} == {
        f for f in expected.submissions if f.endswith(".tsv")
    }
    logged = [json.loads(line) for line in (workdir / "metrics.jsonl").open()]
    evals = [("eval", 2)] * len(results)  # the final evaluation, one record per split
    assert [(r["kind"], r["step"]) for r in logged] == [("train", 1), ("train", 2), *evals]

    before = snapshot(workdir)
    finetune(argv, process=False)
    after = snapshot(workdir)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not changed, f"the rerun of a finished run added, removed or rewrote {changed}"
