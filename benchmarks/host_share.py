"""Each host's local bytes of a `gs://` corpus read with the default config, for P hosts.

For each P, P simulated hosts (each its own XLNET_JAX_CACHE_DIR) read the corpus as
training's process i of P does: stage its small files (preflight's stage_corpus), then
build the train and validation stream batchers of its rows, which stage the shards of its
ranges and write their flat cache (corpus.load_split). config.data_ranges is the default
config's, resolved as `train` resolves it when a run starts on P processes
(run_config.with_data_ranges): R = P. A local corpus is published to the local GCS
emulator (tests/gcs_emulator.py) first; a gs:// one is read where it is. Prints a
markdown table.

  python benchmarks/host_share.py [--corpus DIR] [--processes 1,2,4] [--shards 16]
                                  [--repeat 12]

Without --corpus, the built-in corpus's documents (stdlib docstrings, about 0.4M tokens),
--repeat times over, are prepared (8000 pieces) with each split in --shards shards
(`prepare --num_shards`).
"""

import argparse
import contextlib
import math
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests import gcs_emulator  # noqa: E402
from xlnet_jax import paths  # noqa: E402
from xlnet_jax.config import default_config  # noqa: E402
from xlnet_jax.data import staging  # noqa: E402
from xlnet_jax.data.manifest import load_manifest  # noqa: E402
from xlnet_jax.data.streams import StreamBatcher  # noqa: E402
from xlnet_jax.training import run_config  # noqa: E402

SEQ_LEN, REUSE_LEN = 32, 16  # rows small enough for any range to hold one stream


def host_bytes(cache_root: str) -> dict[str, int]:
    """Bytes of the corpora staged under one host's cache root: "shards" (array_record files
    downloaded), "small" (tokenizer, metadata, manifest: the same on every host) and
    "cached" (the flat .npy caches)."""
    sizes = {"shards": 0, "small": 0, "cached": 0}
    for directory, _, names in os.walk(os.path.join(cache_root, "corpora")):
        for name in names:
            kind = "shards" if staging.SHARD.search(name) else "small"
            kind = "cached" if os.path.basename(directory) == "cache" else kind
            sizes[kind] += os.path.getsize(os.path.join(directory, name))
    return sizes


def default_ranges(processes: int) -> int:
    """config.data_ranges of the default config in a run that starts on `processes`."""
    return run_config.with_data_ranges(default_config(), None, processes).data_ranges


def read_as_host(corpus: str, process: int, processes: int, data_ranges: int) -> None:
    """Stages and caches what process `process` of `processes` reads (both splits)."""
    staged = staging.stage_corpus(load_manifest(corpus))
    for split in staged.splits:
        StreamBatcher(
            staged.path,
            split,
            seq_len=SEQ_LEN,
            reuse_len=REUSE_LEN,
            global_batch=math.lcm(data_ranges, processes),
            bi_data=False,
            seed=0,
            data_ranges=data_ranges,
            process_index=process,
            process_count=processes,
        )


def host_share_rows(corpus_dir: str, processes: list[int]) -> list[dict]:
    """One row per P in `processes`: {"processes", "max_process_bytes" (staged + cached
    bytes of the host holding most), "corpus_bytes" (the corpus's files on storage),
    "staged_bytes", "cached_bytes" (that host's split), "data_ranges" (the default's R)}."""
    with contextlib.ExitStack() as stack:
        corpus = corpus_dir
        if not paths.is_remote(corpus_dir):
            url = stack.enter_context(gcs_emulator.running())
            stack.enter_context(gcs_emulator.pointed_at(url))
            corpus = f"gs://{gcs_emulator.BUCKET}/corpus"
            staging.publish(corpus_dir, corpus)
        manifest = load_manifest(corpus)
        corpus_bytes = sum(f["bytes"] for f in manifest.files.values())
        corpus_bytes += paths.as_path(manifest.tokenizer_path).stat().length
        rows = []
        for count in processes:
            data_ranges, hosts = default_ranges(count), []
            for process in range(count):
                root = stack.enter_context(tempfile.TemporaryDirectory(prefix="host-"))
                with _cache_root(root):
                    read_as_host(corpus, process, count, data_ranges)
                hosts.append(host_bytes(root))
            most = max(hosts, key=lambda h: sum(h.values()))
            rows.append(
                {
                    "processes": count,
                    "max_process_bytes": sum(most.values()),
                    "corpus_bytes": corpus_bytes,
                    "staged_bytes": most["shards"] + most["small"],
                    "cached_bytes": most["cached"],
                    "data_ranges": data_ranges,
                }
            )
        return rows


@contextlib.contextmanager
def _cache_root(root: str):
    previous = os.environ.get(paths.CACHE_ENV)
    os.environ[paths.CACHE_ENV] = root
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(paths.CACHE_ENV)
        else:
            os.environ[paths.CACHE_ENV] = previous


def _prepare_builtin(tmp: str, repeat: int, shards: int) -> str:
    """The built-in corpus's documents `repeat` times over, prepared in `shards` shards."""
    from xlnet_jax.data.builtin_corpus import builtin_documents
    from xlnet_jax.data.prepare import prepare_corpus

    text = os.path.join(tmp, "builtin.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n\n".join(["\n".join(doc) for doc in builtin_documents()] * repeat) + "\n")
    corpus = os.path.join(tmp, "corpus")
    prepare_corpus([text], corpus, vocab_size=8000, num_shards=shards)
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a prepared corpus, local or gs:// (default: built-in)")
    parser.add_argument("--processes", default="1,2,4", help="host counts, comma-separated")
    parser.add_argument("--shards", type=int, default=16, help="shards of the built-in corpus")
    parser.add_argument("--repeat", type=int, default=1, help="copies of the built-in documents")
    args = parser.parse_args()
    processes = [int(p) for p in args.processes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = _prepare_builtin(tmp, args.repeat, args.shards)
        tokens = sum(split["tokens"] for split in load_manifest(corpus).splits.values())
        rows = host_share_rows(corpus, processes)
    print(f"Corpus: {tokens:,} tokens; config.data_ranges: the default.\n")
    print("| hosts P | data_ranges | corpus bytes | most bytes on one host (staged + cached) | "
          "bytes/token on that host | share of P=1 |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['processes']} | {row['data_ranges']} | {row['corpus_bytes']:,} | "
            f"{row['max_process_bytes']:,} "
            f"({row['staged_bytes']:,} + {row['cached_bytes']:,}) | "
            f"{row['max_process_bytes'] / tokens:.2f} | "
            f"{row['max_process_bytes'] / rows[0]['max_process_bytes']:.3f} |"
        )


if __name__ == "__main__":
    main()
