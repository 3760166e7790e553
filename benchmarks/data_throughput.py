"""Data pipeline throughput: corpus preparation and stream batching, on this machine's CPU.

Prepares the built-in corpus (stdlib docstrings) with an 8000-piece vocabulary, then times
StreamBatcher.batch at the small training shape and at the published sequence length, on
one core. Prints a markdown table.

  python benchmarks/data_throughput.py [--corpus DIR] [--steps 300]

--corpus reuses a prepared corpus (no preparation row) instead of a fresh temporary one.
"""

import argparse
import os
import tempfile
import time

from xlnet_jax.data.prepare import load_manifest, prepare_corpus
from xlnet_jax.data.streams import StreamBatcher

SHAPES = (  # (name, seq_len, reuse_len, global batch, bi_data)
    ("small", 128, 64, 16, False),
    ("small, bi_data", 128, 64, 16, True),
    ("seq 512", 512, 256, 8, False),
    ("seq 512, bi_data", 512, 256, 8, True),
)


def time_batches(corpus: str, seq: int, reuse: int, batch: int, bi_data: bool, steps: int):
    """Seconds to build the batcher (split already cached) and mean seconds per batch."""
    start = time.perf_counter()
    batcher = StreamBatcher(
        corpus, "train", seq_len=seq, reuse_len=reuse, global_batch=batch, bi_data=bi_data, seed=0
    )
    setup = time.perf_counter() - start
    batcher.batch(0)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        batcher.batch(step)
    return setup, (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a prepared corpus to time batching on")
    parser.add_argument("--steps", type=int, default=300, help="batches timed per shape")
    parser.add_argument("--vocab_size", type=int, default=8000)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = os.path.join(tmp, "corpus")
            m = prepare_corpus([], corpus, vocab_size=args.vocab_size)
            tokens = sum(s["tokens"] for s in m.splits.values())
            rows.append(
                f"| prepare built-in corpus ({tokens:,} tokens, vocab {m.vocab_size}, "
                f"{os.cpu_count()} cores) | {m.stats['seconds']:.1f} s total | "
                f"{m.stats['tokens_per_second']:,} tokens/s end to end; "
                f"{m.stats['tokenize_tokens_per_second']:,} tokens/s tokenizing |"
            )
        load_start = time.perf_counter()
        StreamBatcher(
            corpus, "train", seq_len=128, reuse_len=64, global_batch=16, bi_data=False, seed=0
        )
        train_tokens = load_manifest(corpus).splits["train"]["tokens"]
        rows.append(
            f"| first StreamBatcher on the train split ({train_tokens:,} tokens; reads tfds and "
            f"writes the .npy cache unless cached) | "
            f"{time.perf_counter() - load_start:.2f} s | |"
        )
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # batching: one core
        for name, seq, reuse, batch, bi_data in SHAPES:
            setup, per_batch = time_batches(corpus, seq, reuse, batch, bi_data, args.steps)
            rows.append(
                f"| batch: {name} (seq {seq}, reuse {reuse}, batch {batch}), 1 core | "
                f"{per_batch * 1e3:.3f} ms/batch ({setup * 1e3:.0f} ms setup) | "
                f"{1 / per_batch:,.0f} batches/s, {batch * seq / per_batch / 1e6:.1f}M tokens/s |"
            )
    print("| what | time | throughput |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
