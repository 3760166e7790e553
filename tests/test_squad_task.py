"""`xlnet-jax finetune --task_name squad` end to end on a tiny HF model: two steps, then the
official figures, the prediction files; and the task's reading of --data_dir."""

import json

import ml_collections
import numpy as np
import pytest
import torch
import transformers

from tests import multilingual
from xlnet_jax import cli
from xlnet_jax.data import normalize, tokenizer
from xlnet_jax.errors import DataError, MissingFileError
from xlnet_jax.finetune.config import finetune_config
from xlnet_jax.finetune.squad import task as squad_task
from xlnet_jax.finetune.squad import windows
from xlnet_jax.finetune.text import TextEncoder

CONTEXT = "the model reads text and learns which words come next in every sentence."


def _squad(questions: list[tuple[str, str, str | None]]) -> dict:
    """SQuAD 2.0 json of (id, question, answer or None) about CONTEXT."""
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
    paragraphs = [{"context": CONTEXT, "qas": qas}]
    return {"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}


def _config() -> ml_collections.ConfigDict:
    """The fine-tuning config of the two-step run's windows."""
    config = finetune_config()
    config.update(seq_len=24, doc_stride=8, max_query_length=6)
    return config


@pytest.fixture(scope="module")
def data_and_model(tmp_path_factory):
    """A SQuAD 2.0 --data_dir and a tiny HF XLNet with a tokenizer (--init_from)."""
    root = tmp_path_factory.mktemp("squad")
    data = root / "data"
    data.mkdir()
    train = [(f"t{i}", "what does the model read?", "text") for i in range(6)]
    train += [("t6", "what comes next?", "words"), ("t7", "who wrote it?", None)]
    dev = [("d0", "what does the model read?", "text"), ("d1", "who wrote it?", None)]
    (data / "train-v2.0.json").write_text(json.dumps(_squad(train)))
    (data / "dev-v2.0.json").write_text(json.dumps(_squad(dev)))
    model = root / "model"
    documents = multilingual.documents(("en",), 60)
    sentences = [normalize.normalize(s, uncased=False) for doc in documents for s in doc]
    model.mkdir()
    tokenizer.train_tokenizer(sentences + [CONTEXT] * 5, str(model / "spiece.model"), 48)
    torch.manual_seed(0)
    config = transformers.XLNetConfig(vocab_size=48, d_model=32, n_layer=1, n_head=2, d_inner=64)
    transformers.XLNetLMHeadModel(config).save_pretrained(model)
    return data, model


def test_finetune_squad_two_steps(data_and_model, tmp_path, monkeypatch):
    data, model = data_and_model
    workdir = tmp_path / "run"
    argv = [
        "finetune", "--task_name", "SQuAD", "--data_dir", str(data),
        "--init_from", str(model), "--workdir", str(workdir),
        "--config=configs/finetune/squad_cpu.py", "--config.num_train_steps=2",
        "--config.seq_len=24", "--config.doc_stride=8", "--config.max_query_length=6",
        "--config.batch_size=8", "--config.warmup_steps=0",
        "--config.start_n_top=3", "--config.end_n_top=2",
    ]  # fmt: skip
    monkeypatch.setattr("sys.argv", ["xlnet-jax", *argv])  # config_flags reads overrides there
    assert cli.main(argv) == 0
    results = json.loads((workdir / "eval_results.json").read_text())
    dev = results.get("dev", results.get("results", {}).get("dev"))
    for key in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "best_f1_thresh"):
        assert key in dev, (key, results)
    predictions = json.loads((workdir / "predictions" / "dev.json").read_text())
    assert set(predictions) == {"d0", "d1"}
    assert all(text and text in CONTEXT for text in predictions.values())  # never empty
    records = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").open()]
    assert [r["id"] for r in records] == ["d0", "d1"]
    assert all(isinstance(r["null_odds"], float) and r["nbest"] for r in records)

    # export-hf: XLNetForQuestionAnswering on the dev windows gives the run's null odds
    out = tmp_path / "hf"
    assert cli.main(["export-hf", str(workdir), f"--out={out}"]) == 0
    hf_model = transformers.XLNetForQuestionAnswering.from_pretrained(out).eval()
    assert (hf_model.config.start_n_top, hf_model.config.end_n_top) == (3, 2)  # the run's
    task = squad_task.Squad()
    dev = task.read(str(data), "dev")
    encoder = TextEncoder(str(model / "spiece.model"))
    features = task.featurize(dev, encoder, _config(), ["answer"])
    batch = windows.batch(features.windows, 24)
    with torch.no_grad():
        hf_out = hf_model(
            input_ids=torch.tensor(batch["input_ids"]),
            token_type_ids=torch.tensor(batch["seg_ids"]),
            input_mask=torch.tensor(batch["input_mask"]),
            p_mask=torch.tensor(batch["p_mask"]),
            cls_index=torch.tensor([w.cls_index for w in features.windows]),
        )
    assert hf_out.end_top_index.shape == (len(features), 3 * 2)
    for q, record in enumerate(records):
        rows = [n for n, w in enumerate(features.windows) if w.question == q]
        hf_null = float(hf_out.cls_logits[rows].min())
        assert abs(record["null_odds"] - hf_null) <= 1e-5, (record["null_odds"], hf_null)


def test_the_task_finds_its_files(tmp_path):
    with pytest.raises(MissingFileError, match="no train-v2.0.json or train-v1.1.json"):
        squad_task.split_file(str(tmp_path), "train")
    (tmp_path / "KorQuAD_v1.0_train.json").write_text("{}")
    assert squad_task.split_file(str(tmp_path), "train").endswith("KorQuAD_v1.0_train.json")
    (tmp_path / "other_train.json").write_text("{}")
    with pytest.raises(DataError, match="several train files"):
        squad_task.split_file(str(tmp_path), "train")


def test_features_hold_the_original_layout_and_the_network_inputs(data_and_model):
    data, model = data_and_model
    task = squad_task.Squad()
    examples = task.read(str(data), "train")
    encoder = TextEncoder(str(model / "spiece.model"))
    features = task.featurize(examples, encoder, _config(), ["answer"])
    arrays = features.arrays
    assert arrays["input_ids"].shape == (len(features), 1, 24)
    cls = np.array([w.cls_index for w in features.windows])
    rows = np.arange(len(features))
    np.testing.assert_array_equal(arrays["seg_ids"][rows, 0, cls], windows.SEG_CLS)
    for name in task.network_inputs:  # what the loop hands the network, one per window
        assert arrays[name].shape[0] == len(features), name
    starts = arrays["start_positions"]
    assert np.all((starts == cls) | (arrays["seg_ids"][rows, 0, starts] == windows.SEG_PARAGRAPH))
    assert {w.question for w in features.windows} == set(range(len(examples)))
