"""XLNet's ingredients at small scale: pretraining variants that each change one ingredient of
the default, judged by the same held-out loss and the same fine-tuning.

Every variant is one `xlnet-jax train` run of --steps on benchmarks/pretrain_vs_hf.py's
corpus (the DESCRIPTIONs of this machine's man pages), tokenizer, config (--config,
configs/tiny.py by default, with --set) and schedule, with its own fields on top:

  default            the config as it is (span prediction, memory, reuse block, bi_data off)
  no memory          mem_len 0: no hidden states carried between steps
  token prediction   max_span 1: single-token targets instead of spans of 1..max_span words
                     (the same num_predict targets a row, so the same K = seq_len / num_predict)
  bi_data            bi_data on: half of the rows are the same streams reversed

(No reuse_len 0: our streams advance by reuse_len tokens a step, so the data layout refuses
0, as the original's data script, which would loop forever on it.)

The judge, the same for every variant:
  * held-out PLM loss by our `eval` under the default's objective (same validation rows,
    targets, orders and carried memory for every variant: comparable), and under the
    variant's own objective (what it trained for; not comparable across variants: the
    targets, the rows or the memory differ);
  * our `finetune` on --tasks (benchmarks/finetune_vs_hf.py's layouts built from other man
    pages; SST-2 by default), --seeds seeds, dev metric and dev loss, beside random weights
    of the same shape and tokenizer;
  * one long document read through the memory (benchmarks/finetune_long_documents.py's man
    task, layout "first": the section of a man page, decided by two DESCRIPTION sentences
    in the first of --long_segments segments of --long_seq_len tokens, licence text after
    them; fine-tuned with mem_len = every earlier position and mem_gradient true), --long_seeds
    seeds; --long_steps 0 skips it.

A rerun with the same --out reuses every finished piece (the corpus, each variant's run,
each eval, each fine-tuning with results); remove --out to start over. The default's run,
its eval and its fine-tunings are laid out as benchmarks/pretrain_steps.py's (--out/run,
--out/at_STEPS, ft_step_STEPS, ft_random), so a pretrain_steps --out whose only budget is
--steps serves as this one's default (the CI smoke adds "no memory" to its run).

    python benchmarks/pretrain_ablations.py --out /tmp/abl --steps 400
"""

import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks import finetune_long_documents as long_docs  # noqa: E402
from benchmarks import finetune_vs_hf as vs_hf  # noqa: E402
from benchmarks import pretrain_steps  # noqa: E402
from benchmarks import pretrain_vs_hf as pvh  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

DEFAULT = "default"
VARIANTS = {  # name -> the --set fields it changes
    DEFAULT: (),
    "no memory": ("mem_len=0",),
    "token prediction": ("max_span=1",),
    "bi_data": ("bi_data=true",),
}
RANDOM = pretrain_steps.RANDOM


def variant_list(text: str) -> list[str]:
    """--variants: comma-separated names of VARIANTS, the default always first."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if unknown := set(names) - set(VARIANTS):
        raise argparse.ArgumentTypeError(f"unknown {sorted(unknown)}; choose from {list(VARIANTS)}")
    return [DEFAULT, *[n for n in names if n != DEFAULT]]


def slug(name: str, steps: int) -> str:
    """A variant's name in its folders; the default's is pretrain_steps' for its budget."""
    return f"step_{steps}" if name == DEFAULT else name.replace(" ", "_")


def settings(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """The options of one variant's run: its folder (the default's is --out itself, laid
    out as pretrain_steps'), its fields after --set."""
    return argparse.Namespace(
        **{
            **vars(args),
            "out": args.out if name == DEFAULT else os.path.join(args.out, slug(name, args.steps)),
            "set": [*args.set, *VARIANTS[name]],
            "budgets": [args.steps],  # pretrain_steps' fields: one checkpoint, the last
        }
    )


def pretrain(args: argparse.Namespace, name: str, corpus_dir: str) -> dict:
    """One variant's run (reused when finished): {"source": a workdir holding its last
    checkpoint alone, "config", "flags"}. (No step times: the variants run one after the
    other under whatever load the machine has; train_throughput.py measures cost.)"""
    run_args = settings(args, name)
    os.makedirs(run_args.out, exist_ok=True)
    config = pvh.run_config(run_args, corpus_dir)
    run = pretrain_steps.pretrain(run_args, corpus_dir, config.vocab_size)
    return {
        "source": pretrain_steps.checkpoint_at(run, args.steps),
        "config": config,
        "flags": pretrain_steps.run_flags(run_args, corpus_dir, config.vocab_size),
    }


def long_document(args: argparse.Namespace, name: str, init_from: str, data: str) -> dict:
    """The long-document task fine-tuned from `init_from` (reused when finished): the dev
    results (a median over seeds with more than one)."""
    workdir = os.path.join(args.out, "long_" + slug(name, args.steps))
    record = "seeds.json" if args.long_seeds > 1 else "eval_results.json"  # finetune --seeds
    path = os.path.join(workdir, record)
    if os.path.isfile(path):
        print(f"reusing the long-document fine-tuning in {workdir}", flush=True)
        with open(path) as f:
            result = json.load(f)
    else:
        full = args.long_seq_len * (args.long_segments - 1)
        result = long_docs.run(
            long_args(args, init_from), data, workdir, args.long_segments, full, True
        )
    return result["dev"] if "dev" in result else result["median"]["dev"]


def long_args(args: argparse.Namespace, init_from: str) -> argparse.Namespace:
    """finetune_long_documents' options for the man task from these options."""
    return argparse.Namespace(
        init_from=init_from, seq_len=args.long_seq_len, segments=args.long_segments,
        steps=args.long_steps, batch=args.long_batch, lr=args.long_lr, seeds=args.long_seeds,
        seed=0, man=args.man, per_section=args.long_per_section,
    )  # fmt: skip


def write_long_task(args: argparse.Namespace, init_from: str) -> tuple[str, dict]:
    """The long-document task's files, by the tokenizer every variant shares: (folder,
    train/dev counts)."""
    data = os.path.join(args.out, "data", "long_first")
    composer = long_docs.Composer(init_from, args.licences)
    counts = long_docs.write_man_task(long_args(args, init_from), composer, data, "first", False)
    return data, counts


def cell(values: list[float]) -> str:
    """A median over seeds with the range in brackets (one seed: the value)."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def loss_cell(result: dict) -> str:
    """An eval's loss, ± its standard error (one batch has none)."""
    spread = f" ± {result['loss_stderr']:.4f}" if "loss_stderr" in result else ""
    return f"{result['loss']:.4f}{spread}"


def table(rows: dict[str, dict], keys: list[tuple[str, str]], long_steps: int) -> str:
    """One row per variant (random weights first, where fine-tuned): held-out losses, each
    fine-tuning metric, the long document's accuracy and loss."""
    long_cols = ["long doc accuracy", "long doc loss"] if long_steps else []
    head = ["variant", "held-out loss (default's eval)", "held-out loss (own eval)",
            *[f"{t} {m}" for t, m in keys], *long_cols]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        losses = [loss_cell(row["common"]), loss_cell(row["own"])] if "common" in row else ["-"] * 2
        long = []
        if long_steps:
            dev = row.get("long")
            long = [f"{dev['accuracy']:.3f}", f"{dev['loss']:.3f}"] if dev else ["-", "-"]
        cells = [name, *losses, *[cell(row["scores"][k]) for k in keys], *long]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pvh.add_arguments(parser)
    parser.set_defaults(tasks="sst-2")
    parser.add_argument("--steps", type=int, default=400, help="pretraining steps, each variant")
    parser.add_argument(
        "--variants", type=variant_list, default=list(VARIANTS), help=f"of {', '.join(VARIANTS)}"
    )
    parser.add_argument("--long_steps", type=int, default=200, help="0: no long document")
    parser.add_argument("--long_seq_len", type=int, default=64)
    parser.add_argument("--long_segments", type=int, default=4)
    parser.add_argument("--long_batch", type=int, default=16)
    parser.add_argument("--long_lr", type=float, default=1e-4)
    parser.add_argument("--long_seeds", type=int, default=1)
    parser.add_argument("--long_per_section", type=int, default=600, help="pages a section")
    parser.add_argument("--licences", default="/usr/share/common-licenses")
    args = pvh.parse(parser, argv)
    begin = time.perf_counter()
    corpus_dir = pvh.corpus(args)
    if args.tasks:
        vs_hf.write_tasks(
            argparse.Namespace(**{**vars(args), "status": ""}), os.path.join(args.out, "data")
        )
    runs = {name: pretrain(args, name, corpus_dir) for name in args.variants}
    default = runs[DEFAULT]
    rows = {}
    if args.tasks:
        rows[RANDOM] = {
            "scores": pvh.downstream(
                args, "random", default["source"], random_weights=True, reuse=True, loss=True
            )
        }
    long_data = None
    if args.long_steps:
        long_data, counts = write_long_task(args, default["source"])
        print(f"long documents: {counts['train']} train, {counts['dev']} dev", flush=True)
    for name, run in runs.items():
        source = run["source"]
        own = pretrain_steps.held_out(source, run["config"], run["flags"])
        common = (
            own
            if name == DEFAULT
            else pretrain_steps.held_out(
                source, default["config"], default["flags"], "held_out_as_default.json"
            )
        )
        row = {"common": common, "own": own, "scores": {}}
        if args.tasks:
            row["scores"] = pvh.downstream(
                args, slug(name, args.steps), source, reuse=True, loss=True
            )
        if long_data:
            row["long"] = long_document(args, name, source, long_data)
        rows[name] = row
    keys = list(rows[DEFAULT]["scores"])
    config = default["config"]
    print(machine())
    print(
        f"\n{args.config} {' '.join(args.set)}: d_model {config.d_model}, {config.n_layer} "
        f"layers, seq_len {config.seq_len}, reuse_len {config.reuse_len}, mem_len "
        f"{config.mem_len}, {config.num_predict} targets a row (K = "
        f"{config.seq_len / config.num_predict:.1f}), max_span {config.max_span}, bi_data "
        f"{config.bi_data}, batch {config.batch_size}, lr {config.learning_rate}, "
        f"{args.steps} steps (warmup {config.warmup_steps}); corpus {corpus_dir}; unigram "
        f"cross-entropy of the held-out tokens "
        f"{rows[DEFAULT]['common']['train_unigram_cross_entropy']:.4f} nats"
    )
    if args.tasks:
        print(
            f"fine-tuning: our finetune, {args.ft_steps} steps, batch {args.batch_size}, lr "
            f"{args.lr}, seeds {list(range(args.seeds))}: medians (range)"
        )
    if args.long_steps:
        print(
            f"long document: {args.long_segments} x {args.long_seq_len} tokens, mem_len "
            f"{args.long_seq_len * (args.long_segments - 1)}, mem_gradient true, "
            f"{args.long_steps} steps of batch {args.long_batch}, lr {args.long_lr}, "
            f"{args.long_seeds} seed(s); chance 0.5"
        )
    print(f"{time.perf_counter() - begin:.0f} s for the whole command\n")
    print(table(rows, keys, args.long_steps))


if __name__ == "__main__":
    main()
