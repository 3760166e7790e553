"""Where pretraining pays: dev score against the number of labelled examples, for a
pretraining run and for random weights of its shape and tokenizer, on two real tasks.

Each start is fine-tuned by our `finetune` on growing subsets of a task's train split
(--sizes, by default 16, 64, 256 and 1,024 labelled examples and all of them), --seeds seeds
a cell (one `finetune --seeds N` process), and scored on the task's dev split; a cell is the
median over the seeds, with their range. The starts are --init_from (the demo's pretraining,
`bash scripts/demo.sh`'s demo/run) and random weights of its shape and tokenizer
(`finetune --random_weights`).

The tasks are text nobody wrote for this project, this machine's man pages, built by the
other benchmarks' helpers:

  man    one text: a page's manual section (1, 3, 7 or 8) from the first --words words of its
         DESCRIPTION, cross references removed (benchmarks/finetune_man_sections.py's task,
         the Fine-tune page's earlier lead example).
  pair   two sentences: do they come from one page (consecutive sentences) or from two pages
         (benchmarks/finetune_vs_hf.py's MNLI pairs, its entailment and contradiction kinds;
         pages go to train or dev by a hash of their name, so no dev page is seen in train).

The learning rate is chosen per start and task, never on dev: --held_out examples of train
(balanced over the labels) are set aside first; no subset ever holds them. Each rate of
--lrs fine-tunes the start once (seed 0) on --select_size examples of the rest and is scored
on the held-out examples (accuracy, then the lower loss on a tie); the best rate is then the
start's rate at every size of that task. "all" is the whole of train but the held-out part.

Subsets are balanced over the labels and nested: the first n of one seeded interleaving of
the labels' examples, so 64 holds the 16. The seeds of a cell share the subset and differ in
the head's initialisation, dropout and batch order; every cell runs --steps steps of
--batch_size (so 16 labels are seen steps * batch_size / 16 times).

A rerun with the same --out reuses each finished run: a cell's or a rate's result is kept
in its own JSON file under --out/cells and --out/select with the settings it ran with, and
a run whose settings (rate, steps, files, start) changed is run again. The table goes to
stdout and, as markdown and as JSON with every seed's scores, into --out; --png draws the
curves (matplotlib, the `plots` extra).

    python benchmarks/label_efficiency.py --init_from demo/run --out demo/label_efficiency \\
        --png docs/images/label_efficiency.png
"""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks import finetune_vs_hf as vs_hf  # noqa: E402
from benchmarks.finetune_man_sections import write_task as write_man_task  # noqa: E402
from benchmarks.harness import machine  # noqa: E402
from benchmarks.pretrain_vs_hf import overrides  # noqa: E402

TASKS = {
    "man": "man page section from its DESCRIPTION (one text, 4 classes)",
    "pair": "two sentences from one man page or from two (a pair, 2 classes)",
}
STARTS = {"pretrained": [], "random weights": ["--random_weights"]}
CHANCE = {"man": 0.25, "pair": 0.5}  # balanced labels
ALL = "all"


# ---- the task files ----


def write_pair_task(root: str, out: str, pages: int, pairs: int) -> None:
    """train.tsv and dev.tsv of `classification` pairs (LABEL<TAB>A<TAB>B): `same` for two
    consecutive sentences of one page, `other` for sentences of two pages, about `pairs`
    train lines and a quarter of that in dev, from finetune_vs_hf's page sample and pairs."""
    sampled = [p for s in ("1", "3", "7", "8") for p in vs_hf.sample_pages(root, s, pages)]
    names = {"entailment": "same", "contradiction": "other"}
    os.makedirs(out, exist_ok=True)
    for seed, (split, count) in enumerate((("train", pairs), ("dev", pairs // 4))):
        group = [p for p in sampled if vs_hf.is_dev(p[0]) == (split == "dev")]
        # nli_pairs gives the kinds in turn; of every 3, the neutral one is dropped.
        lines = [
            f"{names[label]}\t{a}\t{b}"
            for a, b, label in vs_hf.nli_pairs(group, count * 3 // 2, seed)
            if label in names
        ]
        with open(os.path.join(out, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def read_lines(path: str) -> list[str]:
    """The non-empty lines of a task file."""
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().split("\n") if line]


def interleave(lines: list[str], seed: int) -> list[str]:
    """The lines in a seeded order that takes the labels in turn (label = the first
    column), each label's lines shuffled: any prefix is as balanced as the counts allow."""
    rng = np.random.default_rng(seed)
    by_label: dict[str, list[str]] = {}
    for line in lines:
        by_label.setdefault(line.split("\t", 1)[0], []).append(line)
    queues = [
        [group[i] for i in rng.permutation(len(group))] for _, group in sorted(by_label.items())
    ]
    order = []
    for k in range(max(map(len, queues))):
        order += [queue[k] for queue in queues if k < len(queue)]
    return order


def _write(path: str, lines: list[str], seed: int) -> None:
    """`lines` to `path` in a seeded shuffled order (the files carry no order of labels)."""
    order = np.random.default_rng(seed).permutation(len(lines))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[i] for i in order) + "\n")


def split_task(source: str, out: str, held_out: int, sizes: list, select_size: int) -> dict:
    """From the builder's train.tsv and dev.tsv in `source`: the held-out part of train
    (`held_out` examples, balanced) and the pool (the rest, in its nested order); writes
    out/select (train: `select_size` of the pool, dev: the held-out part) and out/n<SIZE>
    (train: the first SIZE of the pool, dev: the task's dev) for each size. Returns
    {"pool": its size, "dirs": {size: folder}, "select": folder}."""
    train = read_lines(os.path.join(source, "train.tsv"))
    order = interleave(train, seed=1)
    held, pool = order[:held_out], interleave(order[held_out:], seed=2)
    if len(pool) < 2:
        raise SystemExit(f"{source}: {len(train)} train lines leave no pool after --held_out")
    dev = os.path.join(source, "dev.tsv")
    dirs = {}
    for size in sizes:
        count = len(pool) if size == ALL else min(size, len(pool))
        folder = os.path.join(out, f"n{size}")
        _write(os.path.join(folder, "train.tsv"), pool[:count], seed=count)
        shutil.copy(dev, os.path.join(folder, "dev.tsv"))
        dirs[size] = folder
    select = os.path.join(out, "select")
    _write(os.path.join(select, "train.tsv"), pool[:select_size], seed=select_size)
    _write(os.path.join(select, "dev.tsv"), held, seed=0)
    return {"pool": len(pool), "dirs": dirs, "select": select}


def write_tasks(args: argparse.Namespace) -> dict[str, dict]:
    """Every task's source files, held-out part, selection folder and subsets under
    --out/data/TASK."""
    tasks = {}
    for task in args.tasks:
        source = os.path.join(args.out, "data", task, "source")
        if task == "man":
            write_man_task(args.man, source, args.per_section, args.words)
        else:
            write_pair_task(args.man, source, args.pages, args.pairs)
        tasks[task] = split_task(
            source, os.path.join(args.out, "data", task), args.held_out, args.sizes,
            args.select_size,
        )  # fmt: skip
        tasks[task]["source"] = source
    return tasks


# ---- the runs, each cached with its settings ----


def _digest(folder: str) -> str:
    """A hash of a data folder's train.tsv and dev.tsv (a changed file reruns its runs)."""
    h = hashlib.sha256()
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def run_cell(args: argparse.Namespace, path: str, data: str, start: str, lr: float,
             seeds: int) -> dict:  # fmt: skip
    """One `finetune --seeds SEEDS` of `start` on `data` at rate `lr`, its result kept in
    path + ".json": {"settings", "accuracy": per seed, "loss": per seed, "seconds"}. A file
    whose settings are these is read instead (a rerun)."""
    settings = {
        "init_from": os.path.abspath(args.init_from), "start": start, "data": _digest(data),
        "lr": lr, "seeds": seeds, "steps": args.steps, "batch_size": args.batch_size,
        "seq_len": args.seq_len, "config": args.config, "set": args.set,
    }  # fmt: skip
    if os.path.isfile(path + ".json"):
        with open(path + ".json") as f:
            kept = json.load(f)
        if kept["settings"] == settings:
            print(f"reusing {path}.json", flush=True)
            return kept
    shutil.rmtree(path, ignore_errors=True)  # what an unfinished or other run left
    fields = {
        "seq_len": args.seq_len, "batch_size": args.batch_size, "learning_rate": lr,
        "num_train_steps": args.steps, "warmup_steps": args.steps // 10,
        "checkpoint_every": args.steps, "eval_every": 0,
        "log_every": max(1, min(25, args.steps // 4)), **overrides(args),
    }  # fmt: skip
    begin = time.perf_counter()
    vs_hf._run(
        "finetune", "--workdir", path, "--config", args.config, "--task_name", "classification",
        "--data_dir", data, "--init_from", args.init_from, f"--seeds={seeds}",
        *[f"--config.{k}={v}" for k, v in fields.items()], *STARTS[start], log=path + ".log",
    )  # fmt: skip
    seconds = time.perf_counter() - begin
    runs = [path] if seeds == 1 else [os.path.join(path, f"seed_{s}") for s in range(seeds)]
    results = [json.load(open(os.path.join(r, "eval_results.json")))["dev"] for r in runs]
    kept = {
        "settings": settings,
        "accuracy": [r["accuracy"] for r in results],
        "loss": [r["loss"] for r in results],
        "seconds": seconds,
    }
    with open(path + ".json", "w") as f:
        json.dump(kept, f, indent=1)
    return kept


def choose_rate(args: argparse.Namespace, task: str, start: str, select: str) -> dict:
    """Each rate of --lrs fine-tuned once on the selection folder (train: --select_size of the
    pool; its dev.tsv: the held-out part of train) and the best by held-out accuracy, then
    lower held-out loss: {"chosen", "held_out": {rate: (accuracy, loss)}}."""
    held = {}
    for lr in args.lrs:
        folder = os.path.join(args.out, "select", task, start.replace(" ", "_"), f"lr_{lr:g}")
        kept = run_cell(args, folder, select, start, lr, seeds=1)
        held[lr] = (kept["accuracy"][0], kept["loss"][0])
    chosen = max(args.lrs, key=lambda lr: (held[lr][0], -held[lr][1]))
    return {"chosen": chosen, "held_out": held}


def run_all(args: argparse.Namespace, tasks: dict[str, dict]) -> dict:
    """{task: {start: {"rate": choose_rate's record, "cells": {size: run_cell's record}}}}."""
    results = {}
    for task, files in tasks.items():
        results[task] = {}
        for start in STARTS:
            rate = choose_rate(args, task, start, files["select"])
            cells = {}
            for size in args.sizes:
                folder = os.path.join(args.out, "cells", task, start.replace(" ", "_"), f"n{size}")
                cells[size] = run_cell(args, folder, files["dirs"][size], start, rate["chosen"],
                                       args.seeds)  # fmt: skip
            results[task][start] = {"rate": rate, "cells": cells}
    return results


# ---- the report ----


def labels(size, pool: int) -> int:
    """The number of labelled examples a size trains on."""
    return pool if size == ALL else min(size, pool)


def cell_text(values: list[float]) -> str:
    """'median (min-max)' of a cell's per-seed accuracies."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(args: argparse.Namespace, tasks: dict, results: dict) -> str:
    """One row per task and start: its chosen rate, then each size's median (range); a
    last row per task with the pretrained median minus the random-weights median."""
    heads = [str(s) for s in args.sizes]
    lines = [
        "| task | start | lr (held-out acc.) | " + " | ".join(heads) + " |",
        "|---|---|---|" + "---|" * len(heads),
    ]
    for task, starts in results.items():
        for start, record in starts.items():
            lr = record["rate"]["chosen"]
            acc = record["rate"]["held_out"][lr][0]
            cells = [cell_text(record["cells"][s]["accuracy"]) for s in args.sizes]
            lines.append(f"| {task} | {start} | {lr:g} ({acc:.3f}) | " + " | ".join(cells) + " |")
        diffs = [
            statistics.median(starts["pretrained"]["cells"][s]["accuracy"])
            - statistics.median(starts["random weights"]["cells"][s]["accuracy"])
            for s in args.sizes
        ]
        lines.append(f"| {task} | pretrained − random | | " + " | ".join(f"{d:+.3f}" for d in diffs)
                     + " |")  # fmt: skip
    return "\n".join(lines)


def report(args: argparse.Namespace, tasks: dict, results: dict, seconds: float) -> str:
    """The machine line, the settings, each task's sizes, and the table."""
    pools = ", ".join(
        f"{t}: {TASKS[t]}, {read_count(f['source'], 'train')} train "
        f"({args.held_out} held out for the rate, pool {f['pool']}), "
        f"{read_count(f['source'], 'dev')} dev, chance {CHANCE[t]:.2f}"
        for t, f in tasks.items()
    )
    rates = ", ".join(f"{lr:g}" for lr in args.lrs)
    return (
        f"{machine()}\n\n"
        f"start: --init_from {args.init_from} and random weights of its shape and tokenizer; "
        f"tasks: {pools}\n"
        f"fine-tuning: {args.config}, {args.steps} steps of batch {args.batch_size}, seq_len "
        f"{args.seq_len}, {args.steps // 10} warmup steps{''.join(' ' + f for f in args.set)}; "
        f"rate chosen of {rates} per task and start on the held-out part of train "
        f"({args.select_size} train examples, seed 0); each cell: dev accuracy, median "
        f"(min-max) of seeds {list(range(args.seeds))}; {seconds:.0f} s for the whole command\n\n"
        + table(args, tasks, results)
    )


def read_count(folder: str, split: str) -> int:
    """Lines of a split's file."""
    return len(read_lines(os.path.join(folder, f"{split}.tsv")))


def plot(path: str, args: argparse.Namespace, tasks: dict, results: dict) -> None:
    """Dev accuracy against labelled examples (log scale), one panel per task, one line per
    start (median over seeds, the range as error bars), chance dotted."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("--png needs matplotlib: pip install -e '.[plots]'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.4 * len(results), 3.5),
                             layout="constrained", squeeze=False)  # fmt: skip
    for ax, (task, starts) in zip(axes[0], results.items(), strict=True):
        xs = [labels(s, tasks[task]["pool"]) for s in args.sizes]
        for start, record in starts.items():
            values = [record["cells"][s]["accuracy"] for s in args.sizes]
            medians = [statistics.median(v) for v in values]
            ax.errorbar(
                xs, medians, marker="o", capsize=3,
                yerr=[[m - min(v) for m, v in zip(medians, values, strict=True)],
                      [max(v) - m for m, v in zip(medians, values, strict=True)]],
                label=f"{start} (lr {record['rate']['chosen']:g})",
            )  # fmt: skip
        ax.axhline(CHANCE[task], color="grey", ls=":", label="chance")
        ax.set(title=f"{task}: {TASKS[task].split(' (')[0]}", xlabel="labelled examples",
               ylabel="dev accuracy", xscale="log")  # fmt: skip
        ax.title.set_fontsize("small")
        # "all" on a second line: its count can sit close to 1024 on the log axis.
        names = [
            f"\n{x} (all)" if s == ALL else str(x) for s, x in zip(args.sizes, xs, strict=True)
        ]
        ax.set_xticks(xs, names)
        ax.minorticks_off()
        ax.legend(fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", flush=True)


def size_list(text: str) -> list:
    """--sizes: comma-separated positive counts and/or `all`, in increasing order."""
    sizes = []
    for item in (s.strip() for s in text.split(",")):
        if item == ALL:
            sizes.append(ALL)
        elif item.isdigit() and int(item) > 0:
            sizes.append(int(item))
        elif item:
            raise argparse.ArgumentTypeError(f"{item!r}: give positive counts or 'all'")
    numbers = [s for s in sizes if s != ALL]
    if not sizes or numbers != sorted(set(numbers)) or sizes.count(ALL) > 1 or (
            ALL in sizes and sizes[-1] != ALL):  # fmt: skip
        raise argparse.ArgumentTypeError(f"{text!r}: increasing counts, 'all' last, e.g. 16,64,all")
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init_from", required=True, help="the pretraining workdir")
    parser.add_argument("--out", required=True, help="where the tasks, runs and results go")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"of {', '.join(TASKS)}")
    parser.add_argument("--sizes", type=size_list, default=size_list("16,64,256,1024,all"))
    parser.add_argument("--seeds", type=int, default=3, help="seeds a cell")
    parser.add_argument("--lrs", default="3e-5,1e-4,3e-4", help="the learning-rate grid")
    parser.add_argument("--select_size", type=int, default=256, help="train size of the choice")
    parser.add_argument("--held_out", type=int, default=200, help="train examples for the choice")
    parser.add_argument("--steps", type=int, default=150, help="fine-tuning steps of every run")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--config", default="configs/finetune/cpu.py")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a fine-tuning config field (repeatable)")  # fmt: skip
    parser.add_argument("--man", default="/usr/share/man")
    parser.add_argument("--per_section", type=int, default=500, help="man task pages a section")
    parser.add_argument("--words", type=int, default=60, help="words of a man task text")
    parser.add_argument("--pages", type=int, default=400, help="pair task pages a section")
    parser.add_argument("--pairs", type=int, default=1500, help="pair task train lines")
    parser.add_argument("--png", help="draw the curves here (needs matplotlib)")
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not args.tasks or set(args.tasks) - set(TASKS):
        parser.error(f"--tasks: choose from {', '.join(TASKS)}")
    args.lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    begin = time.perf_counter()
    tasks = write_tasks(args)
    results = run_all(args, tasks)
    text = report(args, tasks, results, time.perf_counter() - begin)
    print(text)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(
            {"tasks": {t: {"pool": f["pool"], "select": f["select"], "dirs": f["dirs"],
                           "source": f["source"]} for t, f in tasks.items()},
             "results": results, "sizes": args.sizes, "lrs": args.lrs},
            f, indent=1, default=str,
        )  # fmt: skip
    if args.png:
        plot(args.png, args, tasks, results)


if __name__ == "__main__":
    main()
