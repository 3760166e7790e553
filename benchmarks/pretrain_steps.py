"""When pretraining starts to pay: downstream scores against pretraining steps, with the
random-weights line beside them.

One `xlnet-jax train` run (--config, configs/tiny.py by default) on the DESCRIPTIONs of this
machine's man pages (benchmarks/pretrain_vs_hf.py's corpus, its options and defaults) keeps a
checkpoint at each of --steps. Every kept checkpoint is scored by our `eval` on the held-out
split and fine-tuned by our `finetune` the same way on the same three tasks as
pretrain_vs_hf.py (SST-2: one sentence; MNLI: sentence pairs; STS-B: regression; built from
other man pages by benchmarks/finetune_vs_hf.py), --seeds seeds each, and so are random
weights of the same shape and tokenizer (`finetune --random_weights`).

The learning-rate schedule is the run's, over max(--steps): the checkpoint at step 100 of an
800-step run is taken mid-schedule, not from a 100-step run decayed to zero.

A rerun with the same --out reuses what the first one finished (the corpus, the pretraining
run when it holds max(--steps), each checkpoint's held-out loss, each task's fine-tuning
whose every seed has its results), so a budget can be added to a finished run; remove --out
to start over.

A budget "clearly beats" random weights on a task when every seed's score from it is above
every seed's score from random weights (the two ranges do not overlap), on the task's first
metric. The table says, per budget, on which tasks it does; the last line names the smallest
budget that does on every task, or says none of those tried does.

    python benchmarks/pretrain_steps.py --out /tmp/pst --steps 100,200,400,800 \\
        --png docs/images/pretrain_steps.png
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks import finetune_vs_hf as vs_hf  # noqa: E402
from benchmarks import pretrain_vs_hf as pvh  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

RANDOM = "random weights"
CHANCE = {"sst-2": 0.5, "mnli": 1 / 3, "sts-b": 0.0}  # the tasks' balanced labels; no signal


def step_list(text: str) -> list[int]:
    """--steps: comma-separated positive step counts, returned sorted."""
    steps = sorted({int(s) for s in text.split(",") if s.strip()})
    if not steps or steps[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive steps, e.g. 100,200,400")
    return steps


def pretrain(args: argparse.Namespace, corpus_dir: str, vocab_size: int) -> str:
    """`xlnet-jax train` to max(--steps), a checkpoint at each of --steps kept; a run that
    already holds its last checkpoint (a rerun with the same --out) is reused."""
    run = os.path.join(args.out, "run")
    if os.path.isdir(os.path.join(run, "checkpoints", str(args.steps))):
        print(f"reusing the pretraining run in {run}", flush=True)
        return run
    shutil.rmtree(run, ignore_errors=True)
    vs_hf._run(
        "train", "--workdir", run, *run_flags(args, corpus_dir, vocab_size), log=run + ".log"
    )
    return run


def run_flags(args: argparse.Namespace, corpus_dir: str, vocab_size: int) -> list[str]:
    """pretrain_vs_hf's config flags, checkpointing every gcd of --steps and keeping all."""
    every = math.gcd(*args.budgets)
    return [
        *pvh.config_flags(args, corpus_dir, vocab_size),
        f"--config.checkpoint_every={every}",
        f"--config.keep_checkpoints={args.steps // every}",
    ]


def checkpoint_at(run: str, step: int) -> str:
    """A workdir holding the run's checkpoint `step` alone (a copy), so `--init_from` (which
    takes a workdir's newest checkpoint) reads that step."""
    workdir = os.path.join(os.path.dirname(run), f"at_{step}")
    if not os.path.isdir(os.path.join(workdir, "checkpoints", str(step))):
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(
            os.path.join(run, "checkpoints", str(step)),
            os.path.join(workdir, "checkpoints", str(step)),
        )
    return workdir


def held_out(source: str, config, flags: list[str], name: str = "held_out.json") -> dict:
    """Our `eval` of a checkpoint copy (pretrain_vs_hf.held_out), kept in its file `name`
    for a rerun."""
    path = os.path.join(source, name)
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    result = pvh.held_out(source, config, flags)
    with open(path, "w") as f:
        json.dump(result, f, default=float)  # numpy scalars
    return result


def primary(scores: dict) -> dict[str, list[float]]:
    """{task: per-seed values of its first metric} (the one the verdict judges)."""
    firsts = {}
    for (task, _), values in scores.items():
        firsts.setdefault(task, values)
    return firsts


def beats(pretrained: list[float], random: list[float]) -> bool:
    """Every pretrained seed above every random-weights seed."""
    return min(pretrained) > max(random)


def verdict(budgets: list[int], scores: dict) -> str:
    """The smallest budget that clearly beats random weights on every task, or why none."""
    random = primary(scores[RANDOM])
    for step in budgets:
        if all(beats(v, random[t]) for t, v in primary(scores[step]).items()):
            return f"smallest budget that beats random weights on every task: {step} steps"
    never = [t for t in random if not any(beats(primary(scores[s])[t], random[t]) for s in budgets)]
    return (
        f"no budget up to {budgets[-1]} steps beats random weights on every task; "
        f"never on: {', '.join(never)}"
    )


def table(budgets: list[int], losses: dict[int, dict], scores: dict, tokens: int) -> str:
    """Rows: random weights, then each budget; medians over seeds (the range in brackets);
    a * where the budget clearly beats random weights on that task's first metric."""
    keys = list(scores[RANDOM])
    judged = {next(k for k in keys if k[0] == t) for t, _ in keys}  # each task's first metric
    lines = [
        "| start | row tokens | held-out PLM loss | "
        + " | ".join(f"{t} {m}" for t, m in keys)
        + " |",
        "|---|---|---|" + "---|" * len(keys),
    ]
    random = primary(scores[RANDOM])
    for source in [RANDOM, *budgets]:
        cells = []
        for key in keys:
            values = scores[source][key]
            judge = source != RANDOM and key in judged
            mark = "*" if judge and beats(values, random[key[0]]) else ""
            cells.append(
                f"{statistics.median(values):.3f}{mark} ({min(values):.3f}-{max(values):.3f})"
            )
        if source == RANDOM:
            head = f"| {RANDOM} | 0 | - |"
        else:
            loss = losses[source]  # one batch has no standard error
            spread = f" ± {loss['loss_stderr']:.4f}" if "loss_stderr" in loss else ""
            head = f"| step {source} | {source * tokens:,} | {loss['loss']:.4f}{spread} |"
        lines.append(head + " " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(path: str, budgets: list[int], losses: dict[int, dict], scores: dict) -> None:
    """The curves as a PNG: one panel per task's first metric (median over seeds, the range
    as error bars; random weights' median as a dashed line, its range shaded; chance dotted),
    then the held-out loss against the unigram baseline. matplotlib is the `plots` extra."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("--png needs matplotlib: pip install -e '.[plots]'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    random = primary(scores[RANDOM])
    names = {t: m for t, m in reversed(list(scores[RANDOM]))}  # the first metric's name
    panels = len(random) + 1
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels, 3.3), layout="constrained")
    for ax, task in zip(axes, random, strict=False):
        values = [primary(scores[s])[task] for s in budgets]
        medians = [statistics.median(v) for v in values]
        ax.errorbar(
            budgets,
            medians,
            yerr=[
                [m - min(v) for m, v in zip(medians, values, strict=True)],
                [max(v) - m for m, v in zip(medians, values, strict=True)],
            ],
            marker="o",
            capsize=3,
            label="pretrained",
        )
        ax.axhline(
            statistics.median(random[task]), color="C3", ls="--", label=f"{RANDOM} (range shaded)"
        )
        ax.axhspan(min(random[task]), max(random[task]), color="C3", alpha=0.15)
        ax.axhline(CHANCE[task], color="grey", ls=":", label="chance")
        ax.set(title=task, xlabel="pretraining steps", ylabel=names[task], xscale="log")
        ax.set_xticks(budgets, [str(s) for s in budgets])
        ax.minorticks_off()
    axes[0].legend(fontsize="small")
    ax = axes[-1]
    ax.errorbar(
        budgets,
        [losses[s]["loss"] for s in budgets],
        yerr=[losses[s].get("loss_stderr", 0.0) for s in budgets],
        marker="o",
        capsize=3,
    )
    ax.axhline(
        losses[budgets[0]]["train_unigram_cross_entropy"], color="grey", ls=":", label="unigram"
    )
    ax.set(title="held-out PLM loss", xlabel="pretraining steps", ylabel="nats", xscale="log")
    ax.set_xticks(budgets, [str(s) for s in budgets])
    ax.minorticks_off()
    ax.legend(fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pvh.add_arguments(parser)
    parser.add_argument(
        "--steps",
        type=step_list,
        default=step_list("100,200,400,800"),
        help="pretraining budgets, comma-separated: checkpoints of one run to the largest",
    )
    parser.add_argument("--png", help="write the curves here (needs matplotlib)")
    args = pvh.parse(parser, argv)
    if not args.tasks:
        parser.error("--tasks: give at least one task; the fine-tuning is the judge")
    args.budgets, args.steps = args.steps, args.steps[-1]  # pretrain_vs_hf's fields: the run
    begin = time.perf_counter()
    corpus_dir = pvh.corpus(args)
    config = pvh.run_config(args, corpus_dir)
    run = pretrain(args, corpus_dir, config.vocab_size)
    vs_hf.write_tasks(
        argparse.Namespace(**{**vars(args), "status": ""}), os.path.join(args.out, "data")
    )
    flags = run_flags(args, corpus_dir, config.vocab_size)
    losses = {}
    scores = {RANDOM: pvh.downstream(args, "random", run, random_weights=True, reuse=True)}
    for step in reversed(args.budgets):  # the largest first: it decides whether any does
        source = checkpoint_at(run, step)
        losses[step] = held_out(source, config, flags)
        scores[step] = pvh.downstream(args, f"step_{step}", source, reuse=True)
    print(machine())
    print(
        f"\n{args.config} {' '.join(args.set)}: d_model {config.d_model}, {config.n_layer} "
        f"layers, seq_len {config.seq_len}, batch {config.batch_size}, lr {config.learning_rate} "
        f"(warmup {config.warmup_steps}, linear decay to step {args.steps}); corpus "
        f"{corpus_dir}; unigram cross-entropy of the held-out tokens "
        f"{losses[args.budgets[0]]['train_unigram_cross_entropy']:.4f} nats"
    )
    print(
        f"fine-tuning: our finetune, {args.ft_steps} steps, batch {args.batch_size}, lr "
        f"{args.lr}, seeds {list(range(args.seeds))}; {time.perf_counter() - begin:.0f} s "
        "for the whole command\n"
    )
    print(table(args.budgets, losses, scores, config.batch_size * config.seq_len))
    print("\n* every seed above every random-weights seed (first metric of each task)")
    print(verdict(args.budgets, scores))
    if args.png:
        plot(args.png, args.budgets, losses, scores)


if __name__ == "__main__":
    main()
