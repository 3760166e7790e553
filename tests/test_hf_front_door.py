"""HF's own front door: raw text through `AutoTokenizer.from_pretrained(export)` into the
matching XLNetFor... class gives a fine-tuning run's predictions/.

Three tiny runs from random weights (--random_weights, 2 steps) on files in the official
layouts: SST-2 (one sentence), RTE (a pair), SQuAD 2.0 (paragraphs longer than a window).
Each is exported with `export-hf --data_dir`, whose printed id check must find every row
equal here; then HF reads the dev text itself. export-hf's id check naming the causes of
rows that differ (digit-comma split, out-of-vocabulary Hangul, pair truncation) is checked
on text made to hold them.
"""

import json
import sys
from unittest import mock

import numpy as np
import pytest
import torch
import transformers

from tests import finetune_source
from xlnet_jax import cli
from xlnet_jax.checkpoint import hf_tokenizer
from xlnet_jax.data.tokenizer import train_tokenizer
from xlnet_jax.finetune import hf_ids
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.squad import hf_outputs
from xlnet_jax.finetune.text import TextEncoder

WORDS = "river mountain forest lake engine wheel motor gear the a is here and what".split()
CONTEXT = (
    "the river runs past the mountain and the forest. a lake is here. the engine turns "
    "the wheel and the motor turns the gear. what is here is the lake."
)
VOCAB = 48
TINY = dict(d_model=32, n_layer=1, n_head=2, d_head=16, d_inner=64)
FLAGS = [
    "--random_weights",
    "--config.batch_size=8",
    "--config.num_train_steps=2",
    "--config.warmup_steps=0",
    "--config.checkpoint_every=2",
    "--config.log_every=1",
    "--config.learning_rate=1e-3",
]
SEQ_LEN = 32
CLASSIFIER = ["--config=configs/finetune/cpu.py", f"--config.seq_len={SEQ_LEN}"]
SQUAD = ["--config.seq_len=24", "--config.doc_stride=8", "--config.max_query_length=6"]
SQUAD += ["--config.start_n_top=3", "--config.end_n_top=2", "--config.n_best_size=4"]


def _sentences(rng: np.random.Generator, count: int, low: int = 2, high: int = 6) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(low, high))) for _ in range(count)]


@pytest.fixture(scope="module", autouse=True)
def compilation_cache():
    """The test run's compilation cache (SST-2's and RTE's runs compile the same steps)."""
    with finetune_source.run_compilation_cache():
        yield


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """An HF directory of a random 1 x 32 XLNet with a tokenizer of its own (--init_from)."""
    texts = _sentences(np.random.default_rng(0), 2000, 3, 9) + [CONTEXT] * 20
    root = tmp_path_factory.mktemp("source")
    return finetune_source.write_source(root, texts, VOCAB, TINY, scale=0.05)


def _write_glue(root, name: str, header: str, rows: list[str]) -> None:
    (root / name).write_text(header + "\n" + "\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    root = tmp_path_factory.mktemp("SST-2")
    rng = np.random.default_rng(2)
    for split, count in (("train", 16), ("dev", 6)):
        rows = [f"{s}\t{int(rng.integers(2))}" for s in _sentences(rng, count)]
        _write_glue(root, f"{split}.tsv", "sentence\tlabel", rows)
    return root


@pytest.fixture(scope="module")
def rte(tmp_path_factory):
    root = tmp_path_factory.mktemp("RTE")
    rng = np.random.default_rng(3)
    labels = ("entailment", "not_entailment")
    for split, count in (("train", 16), ("dev", 6)):
        pairs = zip(_sentences(rng, count), _sentences(rng, count), strict=True)
        rows = [f"{i}\t{a}\t{b}\t{labels[i % 2]}" for i, (a, b) in enumerate(pairs)]
        _write_glue(root, f"{split}.tsv", "index\tsentence1\tsentence2\tlabel", rows)
    return root


def _squad_file(questions: list[tuple[str, str, str | None]]) -> str:
    qas = [
        {
            "id": qid,
            "question": question,
            "is_impossible": answer is None,
            "answers": [] if answer is None else [
                {"text": answer, "answer_start": CONTEXT.index(answer)}
            ],
        }
        for qid, question, answer in questions
    ]  # fmt: skip
    data = [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]
    return json.dumps({"version": "v2.0", "data": data})


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    train = [(f"t{i}", "what is here?", "a lake") for i in range(6)]
    train += [("t6", "what turns the gear?", "the motor"), ("t7", "who wrote it?", None)]
    dev = [("d0", "what is here?", "a lake"), ("d1", "what turns the wheel?", "the engine")]
    dev += [("d2", "who wrote it?", None)]
    (root / "train-v2.0.json").write_text(_squad_file(train))
    (root / "dev-v2.0.json").write_text(_squad_file(dev))
    return root


def _finetune_and_export(tmp_path_factory, source, data, task: str, *extra) -> tuple:
    """(workdir, export directory, what export-hf printed) of a 2-step run of `task`."""
    workdir = tmp_path_factory.mktemp(f"run-{task}")
    argv = ["finetune", f"--task_name={task}", f"--data_dir={data}", f"--init_from={source}"]
    argv += [f"--workdir={workdir}", *extra, *FLAGS]
    with mock.patch.object(sys, "argv", ["xlnet-jax", *argv]):  # config_flags reads sys.argv
        assert cli.main(argv) == 0
    out = workdir / "hf"
    with mock.patch("builtins.print") as printed:
        assert cli.main(["export-hf", str(workdir), f"--out={out}", f"--data_dir={data}"]) == 0
    return workdir, out, "\n".join(call.args[0] for call in printed.call_args_list)


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, source, sst2):
    return _finetune_and_export(tmp_path_factory, source, sst2, "sst-2", *CLASSIFIER)


@pytest.fixture(scope="module")
def rte_run(tmp_path_factory, source, rte):
    return _finetune_and_export(tmp_path_factory, source, rte, "rte", *CLASSIFIER)


@pytest.fixture(scope="module")
def squad_run(tmp_path_factory, source, squad):
    config = "--config=configs/finetune/squad_cpu.py"
    return _finetune_and_export(tmp_path_factory, source, squad, "squad", config, *SQUAD)


def _dev_logits(workdir) -> np.ndarray:
    lines = (workdir / "predictions" / "dev.jsonl").open()
    return np.array([json.loads(line)["logits"] for line in lines])


def _hf_logits(export, texts_a: list[str], texts_b: list[str] | None) -> np.ndarray:
    """XLNetForSequenceClassification's logits on raw text, tokenised by AutoTokenizer as a
    user would (padding and truncation to the run's seq_len)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    batch = tokenizer(
        texts_a, texts_b, padding=True, truncation=True, max_length=SEQ_LEN, return_tensors="pt"
    )
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}
    cls_type = batch["token_type_ids"][:, -1]
    assert (cls_type == 2).all() and (batch["input_ids"][:, -1] == tokenizer.cls_token_id).all()
    model = transformers.XLNetForSequenceClassification.from_pretrained(export).eval()
    with torch.no_grad():
        return model(**batch).logits.numpy()


def test_a_single_sentence_task_from_raw_text(sst2_run, sst2):
    workdir, export, printed = sst2_run
    assert "AutoTokenizer's ids equal the run's on 22/22 rows" in printed, printed
    dev = get_task("sst-2").read(str(sst2), "dev")
    logits = _hf_logits(export, [e.text_a for e in dev], None)
    assert np.abs(logits - _dev_logits(workdir)).max() <= 1e-5


def test_a_pair_task_from_raw_text(rte_run, rte):
    workdir, export, printed = rte_run
    assert "AutoTokenizer's ids equal the run's on 22/22 rows" in printed, printed
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    dev = get_task("rte").read(str(rte), "dev")
    pair = tokenizer(dev[0].text_a, dev[0].text_b)
    a = len(tokenizer(dev[0].text_a, add_special_tokens=False).input_ids)
    assert pair.token_type_ids == [0] * (a + 1) + [1] * (len(pair.input_ids) - a - 2) + [2]
    logits = _hf_logits(export, [e.text_a for e in dev], [e.text_b for e in dev])
    assert np.abs(logits - _dev_logits(workdir)).max() <= 1e-5


def test_squad_from_raw_text_gives_the_runs_answers_and_null_odds(squad_run, squad):
    workdir, export, printed = squad_run
    assert "AutoTokenizer's ids equal the run's on 8/8 rows" in printed, printed
    questions = get_task("squad").read(str(squad), "dev")
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    inputs, windows = hf_outputs.encode(
        tokenizer, questions, max_length=24, doc_stride=8, max_query_length=6
    )
    assert len(windows) > len(questions)  # the paragraph takes several windows
    model = transformers.XLNetForQuestionAnswering.from_pretrained(export).eval()
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()})
    outputs = {k: out[k].numpy() for k in hf_outputs.OUTPUTS}
    predictions, null_odds, nbest = hf_outputs.answers(
        questions, windows, outputs, inputs["attention_mask"], n_best_size=4, max_answer_length=16
    )
    ours = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").open()]
    assert [r["id"] for r in ours] == list(predictions)
    for record in ours:
        qid = record["id"]
        assert abs(null_odds[qid] - record["null_odds"]) <= 1e-5, (qid, null_odds, record)
        # the same n-best scores, and the same text for each (float32 rounding apart); a text
        # only one side keeps must tie, within that rounding, with one only the other keeps
        # (random weights make two "." pieces' starts near-equal: either may fill the last
        # n-best place); so the same prediction unless two texts' scores tie
        theirs = {e["text"]: e["start_log_prob"] + e["end_log_prob"] for e in nbest[qid]}
        mine = {e["text"]: e["start_log_prob"] + e["end_log_prob"] for e in record["nbest"]}
        assert len(theirs) == len(mine), (qid, theirs, mine)
        assert np.allclose(sorted(theirs.values()), sorted(mine.values()), rtol=0, atol=1e-5), (
            qid, theirs, mine
        )  # fmt: skip
        assert all(abs(theirs[t] - mine[t]) <= 1e-5 for t in mine.keys() & theirs.keys()), (
            qid, theirs, mine
        )  # fmt: skip
        assert len(mine.keys() - theirs.keys()) <= 1, (qid, theirs, mine)
        best = max(mine[t] for t in mine if t)
        assert predictions[qid] == record["prediction"] or mine[predictions[qid]] >= best - 1e-5


def test_the_id_check_names_each_cause(source, tmp_path):
    """hf_ids on rows made to differ: the run's ids against AutoTokenizer's, one cause each."""
    spm_model = tmp_path / "spiece.model"
    rng = np.random.default_rng(4)
    text = _sentences(rng, 2000, 3, 9) + ["차다 가다 나는", "학교에 가다"] * 50
    years, thousands, units = (
        rng.integers(low, high, 500) for low, high in ((1900, 2020), (1, 9), (0, 999))
    )
    numbers = zip(years, thousands, units, strict=True)
    text += [f"in {year}, {a},{b:03d} here" for year, a, b in numbers]
    train_tokenizer(text, str(spm_model), 90)
    hf_tokenizer.write_tokenizer_files(tmp_path, str(spm_model), keep_accents=False, uncased=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    encoder = TextEncoder(str(spm_model))
    a, b = "river mountain forest lake", "engine wheel motor gear"  # 4 + 4 pieces
    assert len(encoder.encode(a)) == len(encoder.encode(b)) == 4
    rows = [
        ("the river is here", "a lake"),  # equal
        ("the 1995, river", None),  # digit-comma: "5," is one piece to HF
        ("괜찮다 차다", None),  # 괜 and 찮 are not in the vocabulary
        (a, b),  # 8 pieces in 8 - 3 = 5: ours cuts 3 + 2, HF 2 + 3
    ]
    agreement = hf_ids.Agreement()
    hf_ids.compare_rows(tokenizer, encoder, rows, 8, agreement)
    assert (agreement.rows, agreement.equal) == (4, 1)
    assert dict(agreement.causes) == {hf_ids.DIGIT_COMMA: 1, hf_ids.HANGUL: 1, hf_ids.TRUNCATION: 1}
    summary = agreement.summary()
    assert summary.startswith("AutoTokenizer's ids equal the run's on 1/4 rows; differing: ")
    assert "'괜'" in summary and "5," in summary
