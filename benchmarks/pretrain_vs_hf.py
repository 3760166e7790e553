"""Pretraining side by side with HF: the same architecture pretrained by `xlnet-jax train` and
by transformers' XLNetLMHeadModel with DataCollatorForPermutationLanguageModeling (torch,
CPU), on the same real text, then judged the same way by our own tools.

The corpus is text nobody wrote for this project: the DESCRIPTION sections of this
machine's English man pages (/usr/share/man/man1..8, troff stripped as
benchmarks/finetune_man_sections.py strips it), one page a document, leaving out every page
the downstream tasks below are built from. `xlnet-jax prepare` trains the SentencePiece
model both sides use and writes the token stream (or pass --corpus, a prepared corpus).

What is the same on both sides:
  * the architecture: the config (--config, configs/tiny.py by default, with --set
    overrides) gives d_model, n_layer, n_head, d_head, d_inner, vocab, mem_len and
    reuse_len; HF's XLNetConfig is built from it (checkpoint/hf.config_to_hf);
  * the rows: HF reads the batch of step t from our StreamBatcher with the run's settings
    (the same token ids and segment ids, batch, seq_len, reuse block, A/B cuts), and carries
    its memory (mem_len, the first reuse_len positions cached) between steps as ours does;
  * the optimisation: AdamW with the config's betas, epsilon and weight decay, the same
    global-norm clip, and our learning-rate schedule itself (optim.learning_rate_schedule:
    linear warmup of --steps // 10, linear decay) in a LambdaLR, for the same --steps;
  * the share of tokens predicted: the collator's plm_probability is num_predict / seq_len
    and its max_span_length our max_span;
  * the judge: HF's weights are saved with save_pretrained, brought in with
    `xlnet-jax import-hf`, and scored by `xlnet-jax eval --init_from` exactly as our run is
    (same validation batches, same fixed PLM targets, memory carried across batches); the
    downstream tasks are fine-tuned from each by our `finetune`.

Where they differ (HF's collator cannot be told otherwise):
  * which tokens are targets: the collator draws span lengths uniformly in
    [1, max_span_length] and one span per context of span / plm_probability tokens, so the
    number of targets per row varies; ours draws p(n) ~ 1/n spans over word starts, a fixed
    num_predict per row (the config's mask_alpha / mask_beta context);
  * the inputs of the targets: the collator replaces each target's token with <mask> in the
    content stream too; ours keeps the token there (the query stream never sees it);
  * the factorisation order: the collator permutes the two halves of the row with one
    shared order of seq_len / 2 positions (its fixed assumption: reuse_len = perm_size =
    seq_len / 2, which configs/tiny.py meets); ours permutes blocks of perm_size inside the
    reuse block and the rest separately;
  * the query stream: the collator's target_mapping is the identity over all seq_len
    positions (loss only on targets), so HF runs the query stream for every position; ours
    for num_predict targets. This is part of what each trainer costs, so it is in tokens/s;
  * initialisation: each side draws its own initial weights (ours: the config's
    initializer_range; HF: XLNetLMHeadModel's init), seeded by the config's seed;
  * weight decay: ours decays the parameters optim.weight_decay_mask selects; HF gets the
    usual grouping, every parameter but biases (r_w/r_r/r_s_bias included) and layer norms;
  * bi_data: the collator has none; the default config has it off on both sides.

Tokens per second are each trainer's mean over its steps past the first logging interval
(ours: the compile is in the first), batch * seq_len tokens a step, measured in this one
run, one after the other on the same machine; torch runs 2 threads.

    python benchmarks/pretrain_vs_hf.py --out /tmp/pvh --steps 300
    python benchmarks/pretrain_vs_hf.py --out /tmp/pvh --steps 300 --tasks ''  # no fine-tuning
"""

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch's threads yield a shared core

from benchmarks import finetune_vs_hf as vs_hf  # noqa: E402
from benchmarks.finetune_man_sections import description  # noqa: E402
from benchmarks.harness import machine  # noqa: E402
from xlnet_jax.checkpoint import hf  # noqa: E402

SECTIONS = ("1", "2", "3", "4", "5", "6", "7", "8")
DOWNSTREAM = ("sst-2", "mnli", "sts-b")  # single sentence, pair, regression


# ---- the corpus ----


def task_pages(args: argparse.Namespace) -> set[str]:
    """Names of the pages the downstream tasks are built from (finetune_vs_hf's draw), left
    out of the corpus whether or not this run fine-tunes, so the corpus is one."""
    return {
        name
        for s in ("1", "3", "7", "8")
        for name, _ in vs_hf.sample_pages(args.man, s, args.pages)
    }


def write_man_text(root: str, path: str, exclude: set[str], per_section: int) -> int:
    """Every DESCRIPTION of 20 words or more (not a .so link, not in `exclude`, at most
    `per_section` pages of a section in name order) as one document; returns the count."""
    documents = []
    for section in SECTIONS:
        folder = os.path.join(root, f"man{section}")
        names = (
            sorted(n for n in os.listdir(folder) if n.endswith(".gz"))
            if os.path.isdir(folder)
            else []
        )
        kept = 0
        for name in names:
            if kept == per_section:
                break
            if name in exclude:
                continue
            try:
                page = gzip.open(os.path.join(folder, name), "rt", errors="replace").read()
            except (OSError, EOFError):
                continue
            text = description(page)
            if len(text.split()) >= 20 and not page.lstrip().startswith(".so"):
                documents.append("\n".join(vs_hf._SENTENCE_END.split(text)))
                kept += 1
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(documents) + "\n")
    return len(documents)


def corpus(args: argparse.Namespace) -> str:
    """The prepared corpus both sides read: --corpus, else the man pages prepared here."""
    if args.corpus:
        return args.corpus
    out = os.path.join(args.out, "corpus")
    if not os.path.isfile(os.path.join(out, "manifest.json")):
        text = os.path.join(args.out, "man.txt")
        count = write_man_text(args.man, text, task_pages(args), args.corpus_pages)
        print(f"{count} man pages' DESCRIPTIONs in {text}", flush=True)
        vs_hf._run(
            "prepare",
            text,
            "--out",
            out,
            f"--vocab_size={args.vocab_size}",
            "--validation_fraction=0.05",
            log=os.path.join(args.out, "prepare.log"),
        )
    return out


# ---- the two trainers ----


def run_config(args: argparse.Namespace, corpus_dir: str):
    """The config both sides train: --config with the run's fields and --set overrides."""
    from xlnet_jax.data.manifest import load_manifest

    fields = {
        **run_fields(args, load_manifest(corpus_dir).vocab_size),
        **overrides(args),
        "corpus_dir": corpus_dir,
    }
    return vs_hf.load_config(args.config, fields)


def run_fields(args: argparse.Namespace, vocab_size: int) -> dict[str, object]:
    """The fields this script sets on top of --config (before --set)."""
    return {
        "vocab_size": vocab_size,
        "num_train_steps": args.steps,
        "warmup_steps": max(1, args.steps // 10),
        "log_every": max(1, min(25, args.steps // 4)),
        "checkpoint_every": args.steps,
        "eval_every": 0,
        "eval_steps": args.eval_steps,
    }


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """--set FIELD=VALUE pairs, the values parsed as JSON where they parse (else strings)."""
    fields = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            fields[key] = json.loads(value)
        except json.JSONDecodeError:
            fields[key] = value
    return fields


def config_flags(args: argparse.Namespace, corpus_dir: str, vocab_size: int) -> list[str]:
    """The same fields as `--config.FIELD=VALUE` flags of our commands."""
    fields = {**run_fields(args, vocab_size), **overrides(args), "corpus_dir": corpus_dir}
    return ["--config", args.config, *[f"--config.{k}={v}" for k, v in fields.items()]]


def train_ours(args: argparse.Namespace, flags: list[str], config) -> dict:
    """`xlnet-jax train`: {"run", "tokens_per_sec", "seconds"}."""
    run = os.path.join(args.out, "ours")
    shutil.rmtree(run, ignore_errors=True)
    start = time.perf_counter()
    vs_hf._run("train", "--workdir", run, *flags, log=run + ".log")
    seconds = time.perf_counter() - start
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    times = [r["step_time"] for r in records if "step_time" in r]
    past = [r["step_time"] for r in records if "step_time" in r and r["step"] > config.log_every]
    step_time = statistics.fmean(past or times)
    return {
        "run": run,
        "tokens_per_sec": config.batch_size * config.seq_len / step_time,
        "seconds": seconds,
    }


def train_hf(args: argparse.Namespace, corpus_dir: str, config) -> dict:
    """HF's XLNetLMHeadModel and permutation collator on our rows, saved with
    save_pretrained and our tokenizer files: {"run", "tokens_per_sec", "seconds"}."""
    import torch
    import transformers

    from xlnet_jax import paths
    from xlnet_jax.checkpoint import hf_tokenizer
    from xlnet_jax.config import ModelConfig
    from xlnet_jax.data.manifest import load_manifest
    from xlnet_jax.data.streams import StreamBatcher
    from xlnet_jax.training import optim

    torch.set_num_threads(2)
    torch.manual_seed(config.seed)
    out = os.path.join(args.out, "hf")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    manifest = load_manifest(corpus_dir)
    shutil.copy(manifest.tokenizer_path, os.path.join(out, hf.TOKENIZER_FILE))
    hf_tokenizer.write_tokenizer_files(
        paths.as_path(out),
        manifest.tokenizer_path,
        keep_accents=manifest.keep_accents,
        uncased=manifest.uncased,
    )
    transformers.logging.set_verbosity_error()
    tokenizer = transformers.XLNetTokenizer.from_pretrained(out)
    ours_ids = {p: manifest.special_ids[p] for p in ("<mask>", "<pad>", "<sep>", "<cls>")}
    theirs = dict(
        zip(
            ("<mask>", "<pad>", "<sep>", "<cls>"),
            tokenizer.convert_tokens_to_ids(["<mask>", "<pad>", "<sep>", "<cls>"]),
            strict=True,
        )
    )
    if ours_ids != theirs:
        raise RuntimeError(f"special ids: corpus {ours_ids}, HF tokenizer {theirs}")
    collator = transformers.DataCollatorForPermutationLanguageModeling(
        tokenizer,
        plm_probability=config.num_predict / config.seq_len,
        max_span_length=config.max_span,
    )
    model = transformers.XLNetLMHeadModel(
        transformers.XLNetConfig(**hf.config_to_hf(ModelConfig.from_config(config)))
    ).train()
    named = dict(model.named_parameters())
    decays = {k: not (k.endswith("bias") or "layer_norm" in k) for k in named}
    optimizer = torch.optim.AdamW(
        [
            {
                "params": [p for k, p in named.items() if decays[k] == decay],
                "weight_decay": config.weight_decay if decay else 0.0,
            }
            for decay in (True, False)
        ],
        lr=config.learning_rate,
        betas=(config.adam_b1, config.adam_b2),
        eps=config.adam_eps,
    )
    schedule = optim.learning_rate_schedule(config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: float(schedule(step)) / config.learning_rate
    )
    batcher = StreamBatcher(
        corpus_dir,
        "train",
        seq_len=config.seq_len,
        reuse_len=config.reuse_len,
        global_batch=config.batch_size,
        bi_data=config.bi_data,
        seed=config.seed,
        next_sentence_prob=config.next_sentence_prob,
    )
    mems = (
        [
            torch.zeros(config.mem_len, config.batch_size, config.d_model)
            for _ in range(config.n_layer)
        ]
        if config.mem_len
        else None
    )  # ours starts at zeros
    times, losses = [], []
    begin = time.perf_counter()
    for step in range(config.num_train_steps):
        start = time.perf_counter()
        batch = batcher.batch(step)
        inputs = collator([torch.from_numpy(row).long() for row in batch["input_ids"]])
        outputs = model(
            **inputs,
            token_type_ids=torch.from_numpy(batch["seg_ids"]).long(),
            mems=mems,
            use_mems=True,
        )
        outputs.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        mems = outputs.mems
        times.append(time.perf_counter() - start)
        losses.append(float(outputs.loss.detach()))
        if (step + 1) % config.log_every == 0:
            print(
                f"  HF step {step + 1}: loss {statistics.fmean(losses[-config.log_every :]):.4f}",
                flush=True,
            )
    seconds = time.perf_counter() - begin
    model.save_pretrained(out)
    step_time = statistics.fmean(times[config.log_every :] or times)
    return {
        "run": out,
        "tokens_per_sec": config.batch_size * config.seq_len / step_time,
        "seconds": seconds,
    }


# ---- the judge ----


def held_out(init_from: str, config, flags: list[str]) -> dict:
    """`xlnet-jax eval --init_from INIT_FROM FLAGS` (its function, evaluate.evaluate_run, in
    this process: one start-up and one compile for both sides): the result's loss,
    loss_stderr, accuracy and train_unigram_cross_entropy."""
    from xlnet_jax.training import evaluate

    print("$ xlnet-jax eval --init_from", init_from, " ".join(flags), flush=True)
    return evaluate.evaluate_run(config, None, init_from)


def downstream(
    args: argparse.Namespace,
    name: str,
    init_from: str,
    random_weights: bool = False,
    reuse: bool = False,
    loss: bool = False,
) -> dict:
    """Our `finetune` of each task from `init_from` (finetune_vs_hf.ours, --seeds seeds;
    `random_weights`: from fresh weights of its shape and tokenizer; `reuse`: a finished
    earlier run's results where there are some; `loss`: each task's loss on its first
    split too, as metric "SPLIT loss"): {(task, metric name): per-seed values}."""
    settings = argparse.Namespace(
        **{**vars(args), "out": os.path.join(args.out, "ft_" + name), "steps": args.ft_steps}
    )
    scores = {}
    for task in args.tasks:
        runs = vs_hf.ours(
            settings,
            task,
            os.path.join(args.out, "data", task),
            init_from,
            list(range(args.seeds)),
            random_weights,
            reuse,
        )
        for split, metric in vs_hf.PRESETS[task][1]:
            label = metric if split == "dev" else f"{split} {metric}"
            scores[(task, label)] = [results[split][metric] for results, _ in runs]
        if loss:
            split = vs_hf.PRESETS[task][1][0][0]
            scores[(task, f"{split} loss")] = [results[split]["loss"] for results, _ in runs]
    return scores


def tables(config, rows: dict[str, dict], scores: dict[str, dict]) -> str:
    """The pretraining table, then (with tasks) the downstream one."""
    tokens = config.num_train_steps * config.batch_size * config.seq_len
    lines = [
        f"| pretraining ({config.num_train_steps} steps, {tokens:,} tokens) | tokens/s | "
        "wall s | held-out PLM loss (our eval) | target accuracy |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        spread = f" ± {row['loss_stderr']:.4f}" if "loss_stderr" in row else ""
        lines.append(
            f"| {name} | {row['tokens_per_sec']:.0f} | {row['seconds']:.0f} | "
            f"{row['loss']:.4f}{spread} | {row['accuracy']:.4f} |"
        )
    if scores:
        names = list(scores)
        lines += [
            "",
            f"| task | metric | {' | '.join(f'{n} median' for n in names)} | "
            f"{' | '.join(f'{n} per seed' for n in names)} |",
            "|---|---|" + "---|" * 2 * len(names),
        ]
        for key in scores[names[0]]:
            values = [scores[n][key] for n in names]
            lines.append(
                f"| {key[0]} | {key[1]} | "
                + " | ".join(f"{statistics.median(v):.3f}" for v in values)
                + " | "
                + " | ".join(" ".join(f"{x:.3f}" for x in v) for v in values)
                + " |"
            )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the corpus, the pretraining config and the downstream judge, all but
    --steps (shared with benchmarks/pretrain_steps.py)."""
    parser.add_argument("--out", required=True, help="where the corpus, runs and logs go")
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config field for both sides (repeatable)",
    )
    parser.add_argument("--eval_steps", type=int, default=16, help="held-out batches")
    parser.add_argument("--corpus", help="a prepared corpus (default: the man pages, here)")
    parser.add_argument("--man", default="/usr/share/man")
    parser.add_argument("--corpus_pages", type=int, default=3000, help="pages per section")
    parser.add_argument("--vocab_size", type=int, default=2000)
    parser.add_argument(
        "--tasks",
        default=",".join(DOWNSTREAM),
        help=f"fine-tuned from both, of {', '.join(DOWNSTREAM)} ('' for none)",
    )
    parser.add_argument("--ft_steps", type=int, default=100, help="fine-tuning steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16, help="fine-tuning batch")
    parser.add_argument("--lr", type=float, default=1e-4, help="fine-tuning peak")
    parser.add_argument("--seq_len", type=int, default=64, help="fine-tuning rows")
    parser.add_argument("--dropout", type=float, default=0.1, help="fine-tuning dropout")
    parser.add_argument("--pages", type=int, default=400, help="task pages per section")
    parser.add_argument("--words", type=int, default=40, help="words of an SST-2 sentence")
    parser.add_argument("--pairs", type=int, default=1600, help="train pairs (dev: a quarter)")


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed options, --tasks as a list of known tasks; --out created."""
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if unknown := set(args.tasks) - set(DOWNSTREAM):
        parser.error(f"--tasks: unknown {sorted(unknown)}; choose from {', '.join(DOWNSTREAM)}")
    os.makedirs(args.out, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--steps", type=int, default=300, help="pretraining steps, each side")
    args = parse(parser, argv)
    corpus_dir = corpus(args)
    config = run_config(args, corpus_dir)
    flags = config_flags(args, corpus_dir, config.vocab_size)
    rows = {"xlnet-jax": train_ours(args, flags, config), "HF": train_hf(args, corpus_dir, config)}
    imported = os.path.join(args.out, "hf_imported")
    print("$ xlnet-jax import-hf", rows["HF"]["run"], "--out", imported, flush=True)
    hf.import_hf(rows["HF"]["run"], imported)  # the command's function, in this process
    sources = {"xlnet-jax": rows["xlnet-jax"]["run"], "HF": imported}
    for name, source in sources.items():
        rows[name].update(held_out(source, config, flags))
    scores = {}
    if args.tasks:
        vs_hf.write_tasks(
            argparse.Namespace(**{**vars(args), "status": ""}), os.path.join(args.out, "data")
        )
        scores = {name: downstream(args, name.lower(), source) for name, source in sources.items()}
    print(machine())
    print(
        f"\n{args.config} {' '.join(args.set)}: d_model {config.d_model}, {config.n_layer} "
        f"layers, seq_len {config.seq_len}, reuse_len {config.reuse_len}, mem_len "
        f"{config.mem_len}, batch {config.batch_size}, {config.num_predict} targets a row "
        f"(HF: plm_probability {config.num_predict / config.seq_len:.3f}), lr "
        f"{config.learning_rate} (warmup {config.warmup_steps}); corpus {corpus_dir}; "
        f"train-unigram cross-entropy of the validation tokens "
        f"{rows['HF']['train_unigram_cross_entropy']:.4f} nats"
    )
    if scores:
        print(
            f"fine-tuning: our finetune, {args.ft_steps} steps, batch {args.batch_size}, lr "
            f"{args.lr}, seeds {list(range(args.seeds))}, from each side's weights"
        )
    print()
    print(tables(config, rows, scores))


if __name__ == "__main__":
    main()
