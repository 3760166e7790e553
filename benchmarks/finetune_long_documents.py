"""Long documents through the recurrence memory: a label only the first segment decides.

Each document is `--segments` x seq_len tokens of filler words; one of two key words
("north" or "south") sits among its first words and decides the label. The head reads the
last segment, so the label is learnable only if the memory carries the first segment there.
Fine-tunes `xlnet-jax finetune --task_name classification` on it for each memory length
(0: the last segment alone; seq_len; seq_len * (segments - 1): every earlier position),
plus the one-segment reading, and prints dev accuracy per setting. First, the speed side:
the train step's time per (num_segments, mem_len), all settings compiled in one process and
called in turn (--time_only stops there).

    python benchmarks/finetune_long_documents.py --init_from demo/run --out /tmp/longdoc
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.finetune_runs import finetune  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

KEYS = ("north", "south")
FILLER = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so what more will some out up other into time could them two may then do first any "
    "my now such like our over man me even most made after also did many before must through"
).split()


def write_task(out: str, words: int, train: int, dev: int, seed: int) -> None:
    """train.tsv and dev.tsv: LABEL<TAB>TEXT, the key word among the first 8 words."""
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    for split, count in (("train", train), ("dev", dev)):
        lines = []
        for _ in range(count):
            label = int(rng.integers(2))
            text = list(rng.choice(FILLER, words))
            text[int(rng.integers(8))] = KEYS[label]
            lines.append(f"{KEYS[label]}\t{' '.join(text)}")
        with open(os.path.join(out, f"{split}.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")


def run(args, data: str, workdir: str, segments: int, mem_len: int) -> dict:
    return finetune(
        workdir,
        "--config", "configs/finetune/cpu.py", "--task_name", "classification",
        "--data_dir", data, "--init_from", args.init_from,
        f"--config.seq_len={args.seq_len}", f"--config.num_segments={segments}",
        f"--config.mem_len={mem_len}", f"--config.num_train_steps={args.steps}",
        f"--config.batch_size={args.batch}", f"--config.learning_rate={args.lr}",
        "--config.log_every=10", f"--config.checkpoint_every={args.steps}",
    )  # fmt: skip


def time_settings(args, settings: list[tuple[int, int]]) -> dict[tuple[int, int], list[float]]:
    """Seconds of the train step per (num_segments, mem_len), measured in this process with
    the settings' steps called in turn (so the machine's load falls on all alike)."""
    import jax

    from xlnet_jax.finetune.compile import example_batch
    from xlnet_jax.finetune.config import finetune_config
    from xlnet_jax.finetune.prepare import with_source_architecture
    from xlnet_jax.finetune.program import build
    from xlnet_jax.finetune.registry import get_task
    from xlnet_jax.run.init_from import load_source
    from xlnet_jax.training import sharding

    task, source = get_task("classification"), load_source(args.init_from)
    steps = {}
    for segments, mem_len in settings:
        config = with_source_architecture(finetune_config(), source)
        config.seq_len, config.batch_size = args.seq_len, args.batch
        config.num_segments, config.mem_len = segments, mem_len
        batch = example_batch(task, config)
        program = build(config, task, ["a", "b"], sharding.make_mesh(config), batch)
        with program.activate():
            state, placed = program.init_state(), program.put_batch(batch)
            for _ in range(2):  # compile, warm up
                state, metrics = program.train_step(state, placed)
        steps[segments, mem_len] = (program, state, placed)
    times = {key: [] for key in settings}
    for _ in range(args.time_iters):
        for key, (program, state, placed) in steps.items():
            with program.activate():
                start = time.perf_counter()
                state, metrics = program.train_step(state, placed)
                jax.block_until_ready(metrics)
                times[key].append(time.perf_counter() - start)
            steps[key] = (program, state, placed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init_from", required=True, help="pretraining workdir or HF dir")
    parser.add_argument("--out", required=True, help="where the task and the runs go")
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--dev", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time_iters", type=int, default=20, help="timed steps per setting")
    parser.add_argument("--time_only", action="store_true", help="only the step-time table")
    args = parser.parse_args()
    timing = [(1, 0), (2, 0), (2, args.seq_len), (4, 0), (4, args.seq_len)]
    timing.append((args.segments, args.seq_len * (args.segments - 1)))
    times = time_settings(args, timing)
    print(machine())
    print(f"\ntrain step, batch {args.batch} texts, seq_len {args.seq_len}, median of "
          f"{args.time_iters} steps, settings called in turn\n")  # fmt: skip
    print("| num_segments | mem_len | ms/step | against one segment |")
    print("|---|---|---|---|")
    one = statistics.median(times[1, 0])
    for (segments, mem_len), seconds in times.items():
        median = statistics.median(seconds)
        print(f"| {segments} | {mem_len} | {1e3 * median:.0f} | {median / one:.2f}x |")
    if args.time_only:
        return
    data = os.path.join(args.out, "data")
    # About 1.3 pieces a filler word: enough words that every document fills all segments.
    write_task(data, 2 * args.seq_len * args.segments, args.train, args.dev, args.seed)
    settings = [(args.segments, m) for m in (0, args.seq_len, args.seq_len * (args.segments - 1))]
    rows = []
    for segments, mem_len in [*settings, (1, 0)]:
        name = f"s{segments}_m{mem_len}"
        result = run(args, data, os.path.join(args.out, name), segments, mem_len)
        rows.append((segments, mem_len, result))
    print(machine())
    print(f"\ndocuments of {args.segments} x seq_len {args.seq_len} tokens, key word in the "
          f"first 8 words; {args.steps} steps of batch {args.batch}; chance 0.5\n")  # fmt: skip
    print("| num_segments | mem_len | tokens read | dev accuracy | ms/step (in the run) |")
    print("|---|---|---|---|---|")
    for segments, mem_len, result in rows:
        note = " (the first segment only)" if segments == 1 else ""
        print(
            f"| {segments} | {mem_len} | {segments * args.seq_len}{note} | "
            f"{result['dev']['accuracy']:.3f} | {result['ms_per_step']:.0f} |"
        )


if __name__ == "__main__":
    main()
