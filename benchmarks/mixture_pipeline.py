"""Input pipeline of a mixture: host ms per batch from three corpora beside one, against the step.

A mixture's batch is its corpora's rows read from their own rings (data/streams.py), so
its host cost should be one corpus's plus a few numpy calls per corpus. Production is
StreamBatcher.batch timed alone (numpy, one host thread); consumption is our compiled
train step at the same shape on a synthetic batch (input_pipeline.py's method).

  python benchmarks/mixture_pipeline.py [--corpora DIR1,DIR2,DIR3] [--shapes small]

Without --corpora, three are prepared in a temporary directory: the built-in corpus (its
tokenizer trained) and the docstrings of the stdlib's json + http and of unittest, each
prepared with that tokenizer (`prepare --spm_model`). The single-corpus row reads the first.
"""

import argparse
import os
import statistics
import sysconfig
import tempfile

from harness import describe, machine, make_trainer, shape_config, time_calls

from xlnet_jax.data.builtin_corpus import builtin_documents
from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.data.streams import StreamBatcher


def prepared(tmp: str) -> list[str]:
    """Three corpora of different text with one tokenizer, in `tmp`."""
    first = os.path.join(tmp, "builtin")
    prepare_corpus([], first, vocab_size=8000)
    stdlib = sysconfig.get_paths()["stdlib"]
    dirs = [first]
    for name, subs in (("json-http", ("json", "http")), ("unittest", ("unittest",))):
        docs = [d for sub in subs for d in builtin_documents(os.path.join(stdlib, sub))]
        text = os.path.join(tmp, f"{name}.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(doc) for doc in docs) + "\n")
        out = os.path.join(tmp, name)
        prepare_corpus([text], out, spm_model=os.path.join(first, "spm.model"), num_workers=1)
        dirs.append(out)
    return dirs


def produced(dirs: list[str], config, iters: int) -> list[float]:
    """Seconds per StreamBatcher.batch call at the shape of `config` (steps 1..); several
    dirs get equal weights."""
    batcher = StreamBatcher(
        dirs,
        "train",
        seq_len=config.seq_len,
        reuse_len=config.reuse_len,
        global_batch=config.batch_size,
        bi_data=config.bi_data,
        seed=0,
        corpus_weights=[1.0] * len(dirs) if len(dirs) > 1 else None,
    )
    steps = iter(range(1, 10**9))
    return time_calls(lambda: batcher.batch(next(steps)), iters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", help="three prepared corpora, comma-separated")
    parser.add_argument("--shapes", default="small")
    parser.add_argument("--iters", type=int, default=10, help="timed train steps per shape")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = args.corpora.split(",") if args.corpora else prepared(tmp)
        print(f"\nmachine: {machine()}\n")
        print(
            "| shape | corpora | batch ms (host) | step ms | batch / step |\n|---|---|---|---|---|"
        )
        notes = []
        for name in args.shapes.split(","):
            config = shape_config(name)
            step = statistics.median(time_calls(make_trainer(config).run, args.iters))
            for mix in ([dirs[0]], dirs):
                make = statistics.median(produced(mix, config, 100 * args.iters))
                print(
                    f"| {name} | {len(mix)} | {1e3 * make:.3f} | {1e3 * step:.1f} | "
                    f"{make / step:.2%} |"
                )
            notes.append(f"{name}: {describe(config)}")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
