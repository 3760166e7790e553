"""Long documents through the recurrence memory: a label only the first segment decides.

Each document is `--segments` x seq_len tokens of filler words; one of two key words
("north" or "south") sits among its first words and decides the label. The head reads the
last segment, so the label is learnable only if the memory carries the first segment there.
Fine-tunes `xlnet-jax finetune --task_name classification` on it for each memory length
(0: the last segment alone; seq_len; seq_len * (segments - 1): every earlier position),
plus the one-segment reading for speed, and prints dev accuracy and ms/step per setting.

    python benchmarks/finetune_long_documents.py --init_from demo/run --out /tmp/longdoc
"""

import argparse
import os
import sys

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
    args = parser.parse_args()
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
    print("| num_segments | mem_len | tokens read | dev accuracy | ms/step |")
    print("|---|---|---|---|---|")
    for segments, mem_len, result in rows:
        note = " (the first segment only)" if segments == 1 else ""
        print(
            f"| {segments} | {mem_len} | {segments * args.seq_len}{note} | "
            f"{result['dev']['accuracy']:.3f} | {result['ms_per_step']:.0f} |"
        )


if __name__ == "__main__":
    main()
