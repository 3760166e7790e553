"""Scores side by side with HF: the same export fine-tuned by transformers (torch, CPU) and
by `xlnet-jax finetune`, on the same files, rows, batches, steps and optimiser.

The tasks are built in GLUE's and SQuAD's official layouts from text nobody wrote for this
project: this machine's man pages (/usr/share/man, the DESCRIPTION sections as
benchmarks/finetune_man_sections.py reads them) and its Debian package database
(scripts/squad_from_dpkg.py --asked_fields):

  sst-2   one DESCRIPTION excerpt; label 1 for a section-1 page (user command), 0 for section 3
          (library function).
  mnli    two sentences of the manual; entailment: consecutive in one page, neutral: the same
          page, not consecutive, contradiction: two pages. dev_matched holds pages of sections
          1 and 3 (as train, other pages), dev_mismatched pages of sections 7 and 8.
  sts-b   a sentence and a copy with a share r of its words replaced by another page's words;
          the score is 5 * (1 - r), in steps of 1.
  squad   SQuAD 2.0 questions on dpkg status entries (who maintains P, its version, ...).

Both sides start from one pretraining run: `--init_from` (a pretraining workdir or an HF
directory), else a short `xlnet-jax train` of configs/tiny.py on the built-in corpus that
this script makes; a workdir is exported with `xlnet-jax export-hf` for HF. Ours runs
`xlnet-jax finetune --init_from` that run. HF's side reads OUR featurized rows (the task's
`featurize`: same token ids, segments, padding and truncation), takes the batch of step t as
ours does (finetune/batches.train_indices of the same seed), and trains with torch's AdamW
(weight decay 0), global-norm clipping at 1.0 and the same linear warmup and decay; our runs
set no layer-wise decay, weight decay 0 and float32. Both score with our official metrics:
HF's logits, and for SQuAD its XLNetForQuestionAnswering top-k outputs on our windows, go
through the task's own `predict` (SQuAD: finetune/squad/postprocess.py) and `metrics`.

    python benchmarks/finetune_vs_hf.py --out /tmp/vs_hf --steps 100 --batch_size 16 --seeds 3
"""

import argparse
import gzip
import hashlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch's threads yield a shared core

from benchmarks.finetune_man_sections import description  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

TASKS = ("sst-2", "mnli", "sts-b", "squad")
# task -> (preset, the metrics the table shows as (split, metric name)).
PRESETS = {
    "sst-2": ("configs/finetune/cpu.py", (("dev", "accuracy"),)),
    "mnli": ("configs/finetune/cpu.py", (("dev_matched", "accuracy"),
                                         ("dev_mismatched", "accuracy"))),
    "sts-b": ("configs/finetune/cpu.py", (("dev", "pearson"), ("dev", "spearman"))),
    "squad": ("configs/finetune/squad_cpu.py", (("dev", "f1"), ("dev", "HasAns_exact"),
                                                ("dev", "best_f1"))),
}  # fmt: skip
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _run(*command: str, log: str) -> None:
    """Runs `python -m xlnet_jax.cli COMMAND...` with its output in `log`."""
    print("$ xlnet-jax", " ".join(command), flush=True)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as out:
        subprocess.run(
            [sys.executable, "-m", "xlnet_jax.cli", *command], check=True,
            env={**os.environ, "PYTHONPATH": REPO}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


# ---- the task files, from the manual and the package database ----


def sample_pages(root: str, section: str, count: int) -> list[tuple[str, str]]:
    """(name, DESCRIPTION text) of up to `count` pages of one section with at least 20 words,
    read in a seeded shuffled order until enough are found."""
    folder = os.path.join(root, f"man{section}")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".gz"))
    found = []
    for i in np.random.default_rng(int(section)).permutation(len(names)):
        try:
            page = gzip.open(os.path.join(folder, names[i]), "rt", errors="replace").read()
        except (OSError, EOFError):
            continue
        text = description(page)
        if len(text.split()) >= 20 and not page.lstrip().startswith(".so"):
            found.append((names[i], text.replace("\t", " ")))
            if len(found) == count:
                break
    return found


def is_dev(name: str) -> bool:
    """A page's split, by a hash of its name (a fifth go to dev)."""
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0


def sentences(text: str) -> list[str]:
    """The sentences of a DESCRIPTION with 6 to 40 words."""
    return [s for s in _SENTENCE_END.split(text) if 6 <= len(s.split()) <= 40]


def _write_tsv(path: str, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join("\t".join(map(str, row)) for row in [header, *rows]) + "\n")


def write_sst2(pages: dict[str, list], out: str, words: int) -> None:
    """SST-2's train.tsv and dev.tsv (sentence<TAB>label): man1 -> 1, man3 -> 0."""
    rows = {"train": [], "dev": []}
    for section, label in (("1", 1), ("3", 0)):
        for name, text in pages[section]:
            rows["dev" if is_dev(name) else "train"].append([" ".join(text.split()[:words]), label])
    os.makedirs(out, exist_ok=True)
    for split, lines in rows.items():
        order = np.random.default_rng(len(lines)).permutation(len(lines))
        _write_tsv(os.path.join(out, f"{split}.tsv"), ["sentence", "label"],
                   [lines[i] for i in order])  # fmt: skip


def nli_pairs(pages: list[tuple[str, str]], count: int, seed: int) -> list[tuple[str, str, str]]:
    """`count` (sentence1, sentence2, label) pairs from pages of 3 or more sentences, the
    labels in turn (none if fewer than two such pages)."""
    rng = np.random.default_rng(seed)
    split = [sentences(text) for _, text in pages]
    many = [s for s in split if len(s) >= 3]
    pairs = []
    for k in range(count if len(many) >= 2 else 0):
        kind = k % 3
        page = int(rng.integers(len(many)))
        first = many[page]
        i = int(rng.integers(len(first) - 2))
        if kind == 0:
            pairs.append((first[i], first[i + 1], "entailment"))
        elif kind == 1:
            pairs.append((first[i], first[int(rng.integers(i + 2, len(first)))], "neutral"))
        else:
            other = many[(page + 1 + rng.integers(len(many) - 1)) % len(many)]
            pairs.append((first[i], other[rng.integers(len(other))], "contradiction"))
    return pairs


def write_mnli(pages: dict[str, list], out: str, count: int) -> None:
    """MNLI's train.tsv, dev_matched.tsv and dev_mismatched.tsv with GLUE's columns."""
    base = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
            "sentence2"]  # fmt: skip
    matched = [p for s in ("1", "3") for p in pages[s]]
    splits = {
        "train": ([p for p in matched if not is_dev(p[0])], count, ["label1"]),
        "dev_matched": ([p for p in matched if is_dev(p[0])], count // 4,
                        [f"label{k}" for k in range(1, 6)]),
        "dev_mismatched": ([p for s in ("7", "8") for p in pages[s]], count // 4,
                           [f"label{k}" for k in range(1, 6)]),
    }  # fmt: skip
    os.makedirs(out, exist_ok=True)
    for seed, (split, (group, size, labels)) in enumerate(splits.items()):
        rows = [
            [n, n, f"{n}e", "manual", a, b, a, b, a, b, *[label] * len(labels), label]
            for n, (a, b, label) in enumerate(nli_pairs(group, size, seed))
        ]
        _write_tsv(os.path.join(out, f"{split}.tsv"), [*base, *labels, "gold_label"], rows)


def overlap_pairs(pages: list[tuple[str, str]], count: int, seed: int):
    """Up to `count` (sentence1, sentence2, score): sentence2 is sentence1 with a share r of
    its words (r in 0, 0.2, ..., 1) replaced by words of another page; score 5 * (1 - r)."""
    rng = np.random.default_rng(seed)
    pool = [s.split() for _, text in pages for s in sentences(text)]
    pairs = []
    for k in range(count if len(pool) >= 2 else 0):
        words = pool[rng.integers(len(pool))]
        other = [w for s in (pool[rng.integers(len(pool))] for _ in range(3)) for w in s]
        replaced = k % 6
        chosen = rng.permutation(len(words))[: round(len(words) * replaced / 5)]
        copy = list(words)
        for position in chosen:
            copy[position] = other[rng.integers(len(other))]
        pairs.append((" ".join(words), " ".join(copy), 5.0 - replaced))
    return pairs


def write_stsb(pages: dict[str, list], out: str, count: int) -> None:
    """STS-B's train.tsv and dev.tsv with GLUE's 10 columns (score last)."""
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]  # fmt: skip
    everything = [p for s in ("1", "3", "7", "8") for p in pages[s]]
    os.makedirs(out, exist_ok=True)
    for seed, (split, size) in enumerate((("train", count), ("dev", count // 4))):
        group = [p for p in everything if is_dev(p[0]) == (split == "dev")]
        rows = [
            [n, "manual", "man", "2026", n, "man", "man", a, b, f"{score:.3f}"]
            for n, (a, b, score) in enumerate(overlap_pairs(group, size, seed))
        ]
        _write_tsv(os.path.join(out, f"{split}.tsv"), header, rows)


def write_squad(out: str, dev_packages: int, status: str) -> None:
    """scripts/squad_from_dpkg.py --asked_fields, dev cut to its first `dev_packages`."""
    subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "squad_from_dpkg.py"), out,
         "--asked_fields", "--status", status], check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    path = os.path.join(out, "dev-v2.0.json")
    dev = json.load(open(path))
    dev["data"] = dev["data"][:dev_packages]
    json.dump(dev, open(path, "w"))


def write_tasks(args: argparse.Namespace, data: str) -> None:
    """Every task's files under data/<task>/."""
    if {"sst-2", "mnli", "sts-b"} & set(args.tasks):
        pages = {s: sample_pages(args.man, s, args.pages) for s in ("1", "3", "7", "8")}
        write_sst2(pages, os.path.join(data, "sst-2"), args.words)
        write_mnli(pages, os.path.join(data, "mnli"), args.pairs)
        write_stsb(pages, os.path.join(data, "sts-b"), args.pairs)
    if "squad" in args.tasks:
        write_squad(os.path.join(data, "squad"), args.squad_dev_packages, args.status)


# ---- the two sides ----


def settings(args: argparse.Namespace, task: str) -> dict[str, object]:
    """The config fields both sides share (on top of the task's preset)."""
    return {
        "num_train_steps": args.steps,
        "warmup_steps": args.steps // 10,
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "weight_decay": 0.0,
        "lr_layer_decay_rate": 1.0,
        "clip_norm": 1.0,
        "adam_b1": 0.9,
        "adam_b2": 0.999,
        "adam_eps": 1e-6,
        "dropout": args.dropout,
        "dropatt": args.dropout,
        "dtype": "float32",
        # HF's recipe on our side too, so the two stacks train the same way: the answer class
        # on the gold start, optax's AdamW (torch's), one clip of the whole batch's gradient.
        "answer_class_start": "gold",
        "adam_variant": "adamw",
        "clip_scope": "global",
        **({} if task == "squad" else {"seq_len": args.seq_len}),
    }


def load_config(preset: str, fields: dict[str, object]):
    """The preset's config with `fields` set."""
    spec = importlib.util.spec_from_file_location("preset", os.path.join(REPO, preset))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    for key, value in fields.items():
        config[key] = value
    return config


def ours(
    args,
    task: str,
    data_dir: str,
    init_from: str,
    seeds: list[int],
    random_weights: bool = False,
    reuse: bool = False,
) -> list[tuple]:
    """`xlnet-jax finetune --seeds N` (one process: the data read and the step compiled
    once): [(eval results, tokens/s)] per seed, tokens/s from the median of the logged
    intervals' step times (metrics.jsonl) but the first, which holds the compile.
    `random_weights` adds --random_weights: init_from's shape and tokenizer, fresh weights.
    `reuse` reads the results a finished earlier command left in the same workdir instead."""
    preset = PRESETS[task][0]
    fields = {**settings(args, task), "seed": seeds[0], "checkpoint_every": args.steps,
              "log_every": max(1, min(25, args.steps // 4)), "eval_every": 0}  # fmt: skip
    workdir = os.path.join(args.out, "ours", task)
    runs = [workdir if len(seeds) == 1 else os.path.join(workdir, f"seed_{s}") for s in seeds]
    if reuse and all(os.path.isfile(os.path.join(r, "eval_results.json")) for r in runs):
        print(f"reusing the fine-tuning in {workdir}", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)  # what an unfinished command left
        _run("finetune", "--workdir", workdir, "--config", preset, "--task_name", task,
             "--data_dir", data_dir, "--init_from", init_from, f"--seeds={len(seeds)}",
             *[f"--config.{k}={v}" for k, v in fields.items()],
             *(["--random_weights"] if random_weights else []), log=workdir + ".log")  # fmt: skip
    tokens = args.batch_size * load_config(preset, fields).seq_len
    results_per_seed = []
    for run in runs:
        records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
        times = [r["step_time"] for r in records if "step_time" in r][1:]  # past the compile
        results = json.load(open(os.path.join(run, "eval_results.json")))
        results_per_seed.append((results, tokens / statistics.median(times)))
    return results_per_seed


def hf_side(args, task: str, data_dir: str, init_from: str, export: str, seeds: list[int]):
    """HF's runs of one task, one per seed: [(eval results, tokens/s)]."""
    import torch

    from xlnet_jax.finetune.prepare import read_inputs

    config = load_config(PRESETS[task][0], settings(args, task))
    inputs = read_inputs(config, task, data_dir, init_from)  # our features: ids, rows, labels
    runs = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = _hf_model(task, export, inputs.labels)
        seconds = _hf_train(model, task, inputs, seed, config)
        results = {split.name: _hf_evaluate(model, task, inputs, split) for split in inputs.evals}
        runs.append((results, args.batch_size * config.seq_len / seconds))
        print(f"  HF {task} seed {seed}: {json.dumps(results)}", flush=True)
    return runs


def _hf_model(task: str, export: str, labels: list[str]):
    import transformers

    transformers.logging.set_verbosity_error()  # not the new head's "MISSING" report
    if task == "squad":
        return transformers.XLNetForQuestionAnswering.from_pretrained(export)
    return transformers.XLNetForSequenceClassification.from_pretrained(
        export, num_labels=len(labels)
    )


def _torch_inputs(task: str, arrays: dict[str, np.ndarray], features) -> dict:
    """HF's keyword arguments for feature rows `arrays` (one segment: [B, 1, L] -> [B, L])."""
    import torch

    out = {
        "input_ids": torch.from_numpy(arrays["input_ids"][:, 0].astype(np.int64)),
        "token_type_ids": torch.from_numpy(arrays["seg_ids"][:, 0].astype(np.int64)),
        "attention_mask": torch.from_numpy((~arrays["input_mask"][:, 0]).astype(np.float32)),
    }
    if task == "squad":
        out["p_mask"] = torch.from_numpy(arrays["p_mask"])
        out["cls_index"] = torch.from_numpy(arrays["cls_index"].astype(np.int64))
    return out


def _squad_extras(features, seq_len: int) -> dict[str, np.ndarray]:
    """p_mask and cls_index of every window (finetune/squad/windows.batch)."""
    from xlnet_jax.finetune.squad import windows

    built = windows.batch(features.windows, seq_len)
    return {"p_mask": built["p_mask"], "cls_index": built["cls_index"]}


def _hf_train(model, task: str, inputs, seed: int, config) -> float:
    """Trains `model` on our training features, step t on our step t's batch; returns the
    median seconds per step past step 10 (or over all steps when there are fewer)."""
    import torch

    from xlnet_jax.finetune.batches import train_indices

    features = inputs.train.features
    arrays = dict(features.arrays)
    if task == "squad":
        arrays.update(_squad_extras(features, config.seq_len))
    steps, warmup = config.num_train_steps, config.warmup_steps
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(config.adam_b1, config.adam_b2),
        eps=config.adam_eps, weight_decay=config.weight_decay,
    )  # fmt: skip

    def factor(step: int) -> float:  # optax's warmup then decay, as training/optim.py
        if step < warmup:
            return step / max(warmup, 1)
        return max(0.0, (steps - step) / max(steps - warmup, 1))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    model.train()
    times = []
    for step in range(steps):
        start = time.perf_counter()
        rows = train_indices(len(features), config.batch_size, seed, step)
        batch = {k: v[rows] for k, v in arrays.items()}
        kwargs = _torch_inputs(task, batch, features)
        if task == "squad":
            kwargs.update(
                start_positions=torch.from_numpy(batch["start_positions"].astype(np.int64)),
                end_positions=torch.from_numpy(batch["end_positions"].astype(np.int64)),
                is_impossible=torch.from_numpy(batch["is_impossible"]),
            )
        else:
            label = batch["label"]  # class ids as int64, scores as float32
            kwargs["labels"] = torch.from_numpy(
                label.astype(np.int64 if label.dtype.kind == "i" else np.float32)
            )
        loss = model(**kwargs).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        schedule.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[10:] or times)


def _hf_evaluate(model, task: str, inputs, split) -> dict[str, float]:
    """Our official metrics of HF's outputs on one eval split (dropout off)."""
    import torch

    features = split.features
    arrays = dict(features.arrays)
    if task == "squad":
        arrays.update(_squad_extras(features, inputs.config.seq_len))
    model.eval()
    parts = []
    with torch.no_grad():
        for start in range(0, len(features), 64):
            batch = {k: v[start : start + 64] for k, v in arrays.items()}
            out = model(**_torch_inputs(task, batch, features))
            parts.append(_hf_outputs(task, out, model.config))
    outputs = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if task != "squad":
        outputs = outputs["logits"]
    else:
        outputs = {"eval": outputs}
    predictions = inputs.task.predict(split.examples, features, outputs, inputs.labels)
    return inputs.task.metrics(split.examples, predictions)


def _hf_outputs(task: str, out, hf_config) -> dict[str, np.ndarray]:
    """HF's outputs as our task's `predict` reads them. XLNetForQuestionAnswering flattens
    its end top-k as [end_n_top, start_n_top] per row (ours: [start_n_top, end_n_top]), and
    its *_log_probs are probabilities (ours: log probabilities)."""
    if task != "squad":
        return {"logits": out.logits.numpy()}
    k_start, k_end = hf_config.start_n_top, hf_config.end_n_top

    def ends(x):
        return x.numpy().reshape(-1, k_end, k_start).transpose(0, 2, 1)

    return {
        "start_top_log_probs": np.log(out.start_top_log_probs.numpy()),
        "start_top_index": out.start_top_index.numpy(),
        "end_top_log_probs": np.log(ends(out.end_top_log_probs)),
        "end_top_index": ends(out.end_top_index),
        "cls_logits": out.cls_logits.numpy(),
    }


# ---- the pretraining, and the table ----


def pretrained(args: argparse.Namespace) -> tuple[str, str]:
    """(the run both sides start from, its HF export)."""
    run = args.init_from
    if run is None:
        corpus = os.path.join(args.out, "corpus")
        run = os.path.join(args.out, "pretrain")
        if not os.path.isfile(os.path.join(corpus, "manifest.json")):
            _run("prepare", "--out", corpus, "--vocab_size", "2000",
                 log=os.path.join(args.out, "prepare.log"))  # fmt: skip
        _run("train", "--config", "configs/tiny.py", "--workdir", run,
             "--config.corpus_dir", corpus, f"--config.num_train_steps={args.pretrain_steps}",
             f"--config.checkpoint_every={args.pretrain_steps}",
             f"--config.eval_every={args.pretrain_steps}",
             log=os.path.join(args.out, "pretrain.log"))  # fmt: skip
    if not os.path.isdir(os.path.join(run, "checkpoints")):
        return run, run  # already an HF directory
    export = os.path.join(args.out, "export")
    _run("export-hf", run, "--out", export, f"--dropout={args.dropout}",
         log=os.path.join(args.out, "export.log"))  # fmt: skip
    return run, export


def table(rows: list[tuple]) -> str:
    """The markdown table: one row per (task, split, metric)."""
    lines = [
        "| task | metric | HF median | ours median | HF per seed | ours per seed | "
        "HF tokens/s | ours tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, metric, hf, mine, hf_speed, our_speed in rows:
        lines.append(
            f"| {task} | {metric} | {statistics.median(hf):.3f} | {statistics.median(mine):.3f} "
            f"| {' '.join(f'{v:.3f}' for v in hf)} | {' '.join(f'{v:.3f}' for v in mine)} "
            f"| {hf_speed:.0f} | {our_speed:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where the data, runs and logs go")
    parser.add_argument("--init_from", help="pretraining workdir or HF directory (default: "
                        "a --pretrain_steps run of configs/tiny.py made here)")  # fmt: skip
    parser.add_argument("--pretrain_steps", type=int, default=600)
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated, of these")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seq_len", type=int, default=64, help="rows of the GLUE tasks")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--man", default="/usr/share/man")
    parser.add_argument("--status", default="/var/lib/dpkg/status")
    parser.add_argument("--pages", type=int, default=400, help="man pages per section")
    parser.add_argument("--words", type=int, default=40, help="words of an SST-2 sentence")
    parser.add_argument("--pairs", type=int, default=1600, help="train pairs (dev: a quarter)")
    parser.add_argument("--squad_dev_packages", type=int, default=40)
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",")]
    if unknown := set(args.tasks) - set(TASKS):
        parser.error(f"--tasks: unknown {sorted(unknown)}; choose from {', '.join(TASKS)}")
    os.makedirs(args.out, exist_ok=True)
    data = os.path.join(args.out, "data")
    write_tasks(args, data)
    init_from, export = pretrained(args)
    seeds = list(range(args.seeds))
    rows = []
    for task in args.tasks:
        folder = os.path.join(data, task)
        hf = hf_side(args, task, folder, init_from, export, seeds)
        mine = ours(args, task, folder, init_from, seeds)
        for split, metric in PRESETS[task][1]:
            name = metric if split == "dev" else f"{split} {metric}"
            rows.append((task, name, [r[split][metric] for r, _ in hf],
                         [r[split][metric] for r, _ in mine],
                         statistics.median(s for _, s in hf),
                         statistics.median(s for _, s in mine)))  # fmt: skip
    print(machine())
    print(
        f"\n{args.steps} steps, batch {args.batch_size}, lr {args.lr} ({args.steps // 10} "
        f"warmup, linear decay), dropout {args.dropout}; seeds {seeds}; init {init_from}\n"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
