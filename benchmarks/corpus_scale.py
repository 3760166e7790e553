"""Corpus preparation at scale: prepare's tokens/s, each host's bytes, a projection.

Makes a corpus of at least --tokens tokens (default 50M) from local text: the built-in
corpus (the standard library's docstrings) written --files ways, copy after copy, each
document of copy k opening with the sentence "Copy k of document d." so that no two
documents are equal. A SentencePiece model (--vocab_size pieces) is trained once on one copy;
every timed run prepares the whole corpus with it (`spm_model`), so the rows time reading,
normalising, tokenizing, the split and writing the array_record shards:

  - the one-process path with 1 and 2 tokenizer workers;
  - Apache Beam's DirectRunner with 1 and 2 worker processes (multi_processing);

then each process's local bytes when P = 1, 2 and 4 simulated hosts read their share of
the corpus behind the local GCS emulator (benchmarks/host_share.py; "pending" where that
script is absent), and a projection for the paper's corpus on a v4-512 slice, labelled
as such, with its formula.

  python benchmarks/corpus_scale.py [--tokens 50000000] [--smoke]

--smoke: one copy of the built-in corpus's first 60 documents and the 1-worker rows (e = 1
in the projection), for the smoke test. Timings depend on the load of this machine: the load
average is printed above the table.
"""

import argparse
import math
import os
import sys
import tempfile
import time

from xlnet_jax.data import builtin_corpus, tokenizer
from xlnet_jax.data.normalize import normalize
from xlnet_jax.data.prepare import manifest_fingerprint, pipeline_options, prepare_corpus

PAPER_TOKENS = 32.9e9  # XLNet-Large's pretraining corpus, SentencePiece tokens
PAPER_HOSTS = 64  # a v4-512 slice: 256 chips, 4 per host
PROCESSES = [1, 2, 4]


def make_corpus(
    directory: str, tokens: int, files: int, vocab_size: int, docs: int | None = None
) -> tuple[list, str]:
    """The text files of a corpus of >= `tokens` tokens from the first `docs` documents of
    the built-in corpus (default: all), and the tokenizer for it."""
    docs = list(builtin_corpus.builtin_documents())[:docs]
    model = os.path.join(directory, "spm.model")
    sentences = [normalize(s, uncased=False) for doc in docs for s in doc]
    tokenizer.train_tokenizer((s for s in sentences if s), model, vocab_size)
    per_copy = sum(len(ids) for ids in tokenizer.load_processor(model).encode(sentences))
    copies = math.ceil(tokens / (per_copy + len(docs)))  # + one <eod> per document
    paths = [os.path.join(directory, f"part-{i:03d}.txt") for i in range(files)]
    outs = [open(path, "w", encoding="utf-8") for path in paths]
    try:
        for k in range(copies):
            for d, doc in enumerate(docs):
                outs[(k * len(docs) + d) % files].write(
                    "\n".join([f"Copy {k} of document {d}.", *doc]) + "\n\n"
                )
    finally:
        for out in outs:
            out.close()
    return paths, model


def timed_prepare(paths: list, model: str, out: str, **engine) -> tuple[int, float, str]:
    """(tokens, seconds, manifest fingerprint) of one preparation with the given model."""
    start = time.perf_counter()
    m = prepare_corpus(paths, out, spm_model=model, validation_fraction=0.02, **engine)
    return m.stats["tokens"], time.perf_counter() - start, manifest_fingerprint(m)


def host_rows(corpus: str) -> list[dict] | None:
    """benchmarks/host_share.py's rows for the corpus, or None while it is absent."""
    try:
        from host_share import host_share_rows
    except ImportError:
        return None
    return host_share_rows(corpus, PROCESSES)


def dataset_bytes(corpus: str) -> int:
    """Bytes of the tfds dataset (array_record shards and metadata) of a local corpus."""
    root = os.path.join(corpus, "xlnet_corpus")
    return sum(
        os.path.getsize(os.path.join(d, name)) for d, _, names in os.walk(root) for name in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--files", type=int, default=16, help="input files the text is cut in")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--smoke", action="store_true", help="one copy, 1-worker rows only")
    parser.add_argument("--docs", type=int, help="use only the built-in corpus's first DOCS")
    args = parser.parse_args()
    if args.smoke:
        args.tokens, args.files, args.vocab_size, args.docs = 1, 4, 500, 60

    rows = []
    with tempfile.TemporaryDirectory(prefix="corpus-scale-") as tmp:
        paths, model = make_corpus(tmp, args.tokens, args.files, args.vocab_size, args.docs)
        text_bytes = sum(os.path.getsize(p) for p in paths)
        rates, fingerprints = {}, set()
        runs = [("one process", 1), ("Beam", 1)]
        runs += [] if args.smoke else [("one process", 2), ("Beam", 2)]
        for path_name, workers in sorted(runs):
            out = os.path.join(tmp, f"{path_name}-{workers}".replace(" ", "-"))
            if path_name == "Beam":
                engine = {"beam_options": pipeline_options("DirectRunner", None, workers)}
            else:
                engine = {"num_workers": workers}
            tokens, seconds, fingerprint = timed_prepare(paths, model, out, **engine)
            fingerprints.add(fingerprint)
            rates[path_name, workers] = tokens / seconds
            rows.append(
                f"| prepare, {path_name}{', DirectRunner' if path_name == 'Beam' else ''}, "
                f"{workers} worker{'s' * (workers > 1)} | {tokens:,} tokens "
                f"({text_bytes / 1e6:.0f} MB of text) in {seconds:.1f} s | "
                f"{tokens / seconds:,.0f} tokens/s |"
            )
            corpus = out
        if len(fingerprints) != 1:  # every engine must write the same corpus
            sys.exit(f"The runs wrote {len(fingerprints)} different corpora: {rows}")
        per_token = dataset_bytes(corpus) / tokens
        share = host_rows(corpus)
        for p in PROCESSES:
            row = next((r for r in share or [] if r["processes"] == p), None)
            if row is None:
                rows.append(f"| local bytes per process, P = {p} (GCS emulator) | pending | |")
            else:
                rows.append(
                    f"| local bytes per process, P = {p} (GCS emulator) | "
                    f"{row['max_process_bytes']:,} of {row['corpus_bytes']:,} | "
                    f"{row['max_process_bytes'] / row['corpus_bytes']:.3f} of the corpus |"
                )
        # The projection: Beam's rate with 1 worker, times the workers, times the
        # efficiency that 2 workers reached here; the disk per host from the P = 4 row.
        measured = ("Beam", 2) in rates
        efficiency = rates["Beam", 2] / (2 * rates["Beam", 1]) if measured else 1.0
        hours = PAPER_TOKENS / (rates["Beam", 1] * PAPER_HOSTS * efficiency) / 3600
        rows.append(
            f"| projection: prepare {PAPER_TOKENS / 1e9:.1f}B tokens on {PAPER_HOSTS} Beam "
            f"workers | {hours:,.1f} h | = tokens / (r1 x workers x e), r1 = "
            f"{rates['Beam', 1]:,.0f} tokens/s (Beam, 1 worker), e = {efficiency:.2f} "
            f"({'2 workers / twice 1 worker' if measured else 'assumed: no 2-worker row'}) |"
        )
        fraction = 1 / 4
        row4 = next((r for r in share or [] if r["processes"] == 4), None)
        if row4 is not None:
            fraction = row4["max_process_bytes"] / row4["corpus_bytes"]
        disk = PAPER_TOKENS * per_token * fraction * 4 / PAPER_HOSTS
        source = "the P = 4 row" if row4 else "1/P (P = 4 row pending)"
        rows.append(
            f"| projection: dataset bytes per host, {PAPER_TOKENS / 1e9:.1f}B tokens on "
            f"{PAPER_HOSTS} hosts | {disk / 1e9:,.1f} GB | = tokens x b x (share at P = 4) x "
            f"4 / hosts, b = {per_token:.2f} B/token (this corpus's array_record dataset), "
            f"share from {source}; the stream cache adds its own bytes per token |"
        )
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{len(os.sched_getaffinity(0))} cores; Python {sys.version.split()[0]}")  # fmt: skip
    print("| what | measured | rate or formula |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
