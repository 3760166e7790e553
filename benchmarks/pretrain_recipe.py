"""Pretraining's update: the paper's (the original's TPU train.py) against ours, over
pretraining seeds, judged by benchmarks/pretrain_vs_hf.py's judge.

Every recipe is one `xlnet-jax train` run per seed (--pretrain_seeds, config.seed: the
initial weights, the data streams, the PLM targets and dropout) of --steps on
pretrain_vs_hf.py's corpus (the DESCRIPTIONs of this machine's man pages), tokenizer,
config (--config, configs/tiny.py by default, with --set) and schedule, with its own fields
on top:

  default        optax adamw (bias-corrected), one global clip: HF's and the original train_gpu's
  paper's Adam   pretrain_adam_variant original: AdamWeightDecayOptimizer, no bias
                 correction (its early steps are larger)
  paper's update the paper's Adam and the TPU train.py's per-core clip over 8 cores
                 (pretrain_clip_replicas 8: each core's gradient / 8 clipped, then summed)
  paper's Adam, lr 2.5e-4
                 the paper's Adam at a quarter of configs/tiny.py's peak rate: whether
                 its gap is its larger early steps (without bias correction an update is
                 (1 - b1^t) / sqrt(1 - b2^t) times adamw's: 5.0x at t = 40, 3.2x at 100)

The judge is pretrain_vs_hf.py's, the same for every run: our `eval` of the held-out split
under the default's seed-0 config (the same validation rows, targets, orders and carried
memory for every run: the recipes change the update, not the objective), and our `finetune`
on --tasks (SST-2 by default), --seeds fine-tuning seeds from each run. The table gives
each recipe's per-seed figures, their mean and the mean difference from the default.

A rerun with the same --out reuses every finished piece (the corpus, each run, each eval,
each fine-tuning with results); remove --out to start over.

    python benchmarks/pretrain_recipe.py --out /tmp/recipe --steps 300 --seeds 1
"""

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks import finetune_vs_hf as vs_hf  # noqa: E402
from benchmarks import pretrain_steps  # noqa: E402
from benchmarks import pretrain_vs_hf as pvh  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

DEFAULT = "default"
RECIPES = {  # name -> the --set fields it changes
    DEFAULT: (),
    "paper's Adam": ("pretrain_adam_variant=original",),
    "paper's update": ("pretrain_adam_variant=original", "pretrain_clip_replicas=8"),
    # is the paper's Adam's gap its larger early steps? the same at a quarter of tiny's rate
    "paper's Adam, lr 2.5e-4": ("pretrain_adam_variant=original", "learning_rate=0.00025"),
}


def recipe_list(text: str) -> list[str]:
    """--recipes: comma-separated names of RECIPES, the default always first."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if unknown := set(names) - set(RECIPES):
        raise argparse.ArgumentTypeError(f"unknown {sorted(unknown)}; choose from {list(RECIPES)}")
    return [DEFAULT, *[n for n in names if n != DEFAULT]]


def seed_list(text: str) -> list[int]:
    """--pretrain_seeds: comma-separated non-negative seeds."""
    return [int(s) for s in text.split(",") if s.strip()]


def settings(args: argparse.Namespace, name: str, seed: int) -> argparse.Namespace:
    """The options of one recipe's run at one seed: its folder, its fields after --set."""
    slug = name.replace("'", "").replace(" ", "_")
    return argparse.Namespace(
        **{
            **vars(args),
            "out": os.path.join(args.out, f"{slug}_seed{seed}"),
            "set": [*args.set, f"seed={seed}", *RECIPES[name]],
            "budgets": [args.steps],  # pretrain_steps' fields: one checkpoint, the last
        }
    )


def run(args: argparse.Namespace, name: str, seed: int, corpus_dir: str, judge) -> dict:
    """One recipe at one seed, pretrained and judged (each piece reused when finished):
    {"loss": the held-out eval, "scores": {(task, metric): per fine-tuning seed values}}."""
    run_args = settings(args, name, seed)
    os.makedirs(run_args.out, exist_ok=True)
    config = pvh.run_config(run_args, corpus_dir)
    workdir = pretrain_steps.pretrain(run_args, corpus_dir, config.vocab_size)
    source = pretrain_steps.checkpoint_at(workdir, args.steps)
    loss = pretrain_steps.held_out(source, judge["config"], judge["flags"], "held_out_common.json")
    scores = {}
    if args.tasks:
        scores = pvh.downstream(args, os.path.basename(run_args.out), source, reuse=True)
    return {"loss": loss, "scores": scores}


def table(rows: dict[str, dict[int, dict]]) -> str:
    """One row per recipe: per-seed held-out loss and first fine-tuning metrics (the mean
    over fine-tuning seeds per pretraining seed), their means, and the default's mean
    subtracted."""
    default = rows[DEFAULT]
    keys = list(next(iter(default.values()))["scores"])

    def figures(results: dict[int, dict]) -> dict[str, list[float]]:
        out = {"held-out PLM loss": [r["loss"]["loss"] for r in results.values()]}
        for key in keys:
            out[f"{key[0]} {key[1]}"] = [
                statistics.fmean(r["scores"][key]) for r in results.values()
            ]
        return out

    base = figures(default)
    head = ["recipe", *[f"{k} (per seed; mean; - default)" for k in base]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, results in rows.items():
        cells = [name]
        for label, values in figures(results).items():
            mean = statistics.fmean(values)
            delta = mean - statistics.fmean(base[label])
            seeds = " ".join(f"{v:.4f}" for v in values)
            cells.append(f"{seeds}; {mean:.4f}; {delta:+.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pvh.add_arguments(parser)
    parser.set_defaults(tasks="sst-2")
    parser.add_argument("--steps", type=int, default=400, help="pretraining steps, each run")
    parser.add_argument(
        "--recipes", type=recipe_list, default=list(RECIPES), help=f"of {', '.join(RECIPES)}"
    )
    parser.add_argument("--pretrain_seeds", type=seed_list, default=[0, 1, 2])
    args = pvh.parse(parser, argv)
    begin = time.perf_counter()
    corpus_dir = pvh.corpus(args)
    if args.tasks:
        vs_hf.write_tasks(
            argparse.Namespace(**{**vars(args), "status": ""}), os.path.join(args.out, "data")
        )
    judge_args = settings(args, DEFAULT, args.pretrain_seeds[0])
    config = pvh.run_config(judge_args, corpus_dir)
    judge = {
        "config": config,
        "flags": pretrain_steps.run_flags(judge_args, corpus_dir, config.vocab_size),
    }
    rows = {name: {} for name in args.recipes}
    for seed in args.pretrain_seeds:  # seed by seed: a stopped run leaves whole pairs
        for name in args.recipes:
            rows[name][seed] = run(args, name, seed, corpus_dir, judge)
    print(machine())
    print(
        f"\n{args.config} {' '.join(args.set)}: d_model {config.d_model}, {config.n_layer} "
        f"layers, seq_len {config.seq_len}, batch {config.batch_size}, lr "
        f"{config.learning_rate}, weight decay {config.weight_decay}, clip {config.clip_norm}, "
        f"{args.steps} steps (warmup {config.warmup_steps}); pretraining seeds "
        f"{args.pretrain_seeds}; corpus {corpus_dir}; unigram cross-entropy of the held-out "
        f"tokens {rows[DEFAULT][args.pretrain_seeds[0]]['loss']['train_unigram_cross_entropy']:.4f}"
        " nats"
    )
    if args.tasks:
        print(
            f"fine-tuning: our finetune, {args.ft_steps} steps, batch {args.batch_size}, lr "
            f"{args.lr}, seeds {list(range(args.seeds))} from each run"
        )
    print(f"{time.perf_counter() - begin:.0f} s for the whole command\n")
    print(table(rows))


if __name__ == "__main__":
    main()
