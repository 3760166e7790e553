"""Input pipeline against the train step: batches/s StreamBatcher produces vs the step consumes.

The training loop builds the next batch in a thread while the current step runs, so the
pipeline keeps up when it produces faster than the step consumes. Production is timed
alone (numpy, one host thread), consumption is our compiled train step on a synthetic batch
of the same shape (its cost does not depend on which ids the rows hold).

  python benchmarks/input_pipeline.py [--corpus DIR] [--shapes small,bench]

Without --corpus, the built-in corpus is prepared in a temporary directory first.
"""

import argparse
import os
import statistics
import tempfile

from harness import describe, machine, make_trainer, ms, shape_config, time_calls

from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.data.streams import StreamBatcher


def produced(corpus: str, config, iters: int) -> list[float]:
    """Seconds per StreamBatcher.batch call at the shape of `config` (steps 1..)."""
    batcher = StreamBatcher(
        corpus,
        "train",
        seq_len=config.seq_len,
        reuse_len=config.reuse_len,
        global_batch=config.batch_size,
        bi_data=config.bi_data,
        seed=0,
    )
    steps = iter(range(1, 10**9))
    return time_calls(lambda: batcher.batch(next(steps)), iters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a prepared corpus (default: prepare the built-in one)")
    parser.add_argument("--shapes", default="small,bench")
    parser.add_argument("--iters", type=int, default=10, help="timed train steps per shape")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = os.path.join(tmp, "corpus")
            prepare_corpus([], corpus, vocab_size=8000)
        print(f"\nmachine: {machine()}\n")
        print(
            "| shape | batch ms: produced | step ms: consumed | batches/s produced | consumed "
            "| ratio |\n|---|---|---|---|---|---|"
        )
        notes = []
        for name in args.shapes.split(","):
            config = shape_config(name)
            make = produced(corpus, config, 100 * args.iters)
            use = time_calls(make_trainer(config).run, args.iters)
            per_make, per_use = statistics.median(make), statistics.median(use)
            print(
                f"| {name} | {1e3 * per_make:.2f} | {ms(use)} | {1 / per_make:,.0f} | "
                f"{1 / per_use:.2f} | {per_use / per_make:,.0f}x |"
            )
            notes.append(f"{name}: {describe(config)}")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
