"""Corpus preparation at scale: prepare's tokens/s, each host's bytes, a projection.

Makes a corpus of at least --tokens tokens (default 50M) from local text: the built-in
corpus (the standard library's docstrings) written --files ways, copy after copy, each
document of copy k opening with the sentence "Copy k of document d." so that no two
documents are equal. A SentencePiece model (--vocab_size pieces) is trained once on one copy;
every timed run prepares the whole corpus with it (`spm_model`), so the rows time reading,
normalising, tokenizing, the split and writing the array_record shards:

  - the one-process path with 1 and 2 tokenizer workers;
  - Apache Beam's DirectRunner with 1 and 2 worker processes (multi_processing), writing
    to a local directory, then to gs:// on the local GCS emulator (tests/gcs_emulator.py):
    the workers upload their shards themselves, as Dataflow's do;

then each process's local bytes when P = 1, 2 and 4 simulated hosts read their share of
the gs:// corpus with the default config.data_ranges (benchmarks/host_share.py), and
projections for the paper's corpus, labelled as such, with their formulas: its
preparation on Dataflow, its bytes per host on a v4-512 slice.

  python benchmarks/corpus_scale.py [--tokens 50000000] [--smoke]

--smoke: one copy of the built-in corpus's first 60 documents and the 1-worker rows (e = 1
in the projection), for the smoke test. Timings depend on the load of this machine: the load
average is printed above the table.
"""

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.host_share import host_share_rows  # noqa: E402
from tests import gcs_emulator  # noqa: E402
from xlnet_jax.data import builtin_corpus, tokenizer  # noqa: E402
from xlnet_jax.data.normalize import normalize  # noqa: E402
from xlnet_jax.data.prepare import manifest_fingerprint, pipeline_options, prepare_corpus  # noqa: E402

PAPER_TOKENS = 32.9e9  # XLNet-Large's pretraining corpus, SentencePiece tokens
PAPER_HOSTS = 64  # a v4-512 slice: 256 chips, 4 per host
PROCESSES = [1, 2, 4]
GCS = "Beam to gs://"  # the runs whose workers upload their shards to the emulator


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


def timed_prepare(paths: list, model: str, out: str, **engine) -> tuple[int, float, tuple]:
    """(tokens, seconds, what the corpus is) of one preparation with the given model: its
    manifest fingerprint and the sha256 of every file, which all runs must share."""
    start = time.perf_counter()
    m = prepare_corpus(paths, out, spm_model=model, validation_fraction=0.02, **engine)
    files = tuple(sorted((name, f["sha256"]) for name, f in m.files.items()))
    return m.stats["tokens"], time.perf_counter() - start, (manifest_fingerprint(m), files)


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
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="corpus-scale-"))
        paths, model = make_corpus(tmp, args.tokens, args.files, args.vocab_size, args.docs)
        text_bytes = sum(os.path.getsize(p) for p in paths)
        url = stack.enter_context(gcs_emulator.running())
        stack.enter_context(gcs_emulator.pointed_at(url))
        rates, corpora = {}, set()
        workers_list = [1] if args.smoke else [1, 2]
        runs = sorted((name, n) for name in ("one process", "Beam") for n in workers_list)
        runs += [(GCS, n) for n in workers_list]  # after the local rows, which they match
        for path_name, workers in runs:
            if path_name == GCS:
                out = f"gs://{gcs_emulator.BUCKET}/beam-{workers}"
            else:
                out = os.path.join(tmp, f"{path_name}-{workers}".replace(" ", "-"))
            if path_name == "one process":
                engine = {"num_workers": workers}
            else:
                engine = {"beam_options": pipeline_options("DirectRunner", None, workers)}
            tokens, seconds, written = timed_prepare(paths, model, out, **engine)
            corpora.add(written)
            rates[path_name, workers] = tokens / seconds
            label = path_name + (", DirectRunner" if path_name != "one process" else "")
            rows.append(
                f"| prepare, {label}, {workers} worker{'s' * (workers > 1)} | {tokens:,} "
                f"tokens ({text_bytes / 1e6:.0f} MB of text) in {seconds:.1f} s | "
                f"{tokens / seconds:,.0f} tokens/s |"
            )
        if len(corpora) != 1:  # every engine must write the same corpus, file for file
            sys.exit(f"The runs wrote {len(corpora)} different corpora: {rows}")
        corpus = out  # the last run's: gs://, written by Beam's workers
        share = host_share_rows(corpus, PROCESSES)  # data_ranges: the default, R = P
        for row in share:
            rows.append(
                f"| local bytes per process, P = {row['processes']} (gs:// on the emulator, "
                f"default data_ranges = {row['data_ranges']}) | {row['max_process_bytes']:,} "
                f"(corpus: {row['corpus_bytes']:,}) | "
                f"{row['max_process_bytes'] / share[0]['max_process_bytes']:.3f} of P = 1 |"
            )
        # The projection: Dataflow workers of one core, each at the rate of one DirectRunner
        # worker writing to gs:// here, with the efficiency that 2 such workers reached.
        measured = (GCS, 2) in rates
        r1 = rates[GCS, 1]
        efficiency = rates[GCS, 2] / (2 * r1) if measured else 1.0
        hours = PAPER_TOKENS / (r1 * PAPER_HOSTS * efficiency) / 3600
        rows.append(
            f"| projection: prepare {PAPER_TOKENS / 1e9:.1f}B tokens with DataflowRunner, "
            f"{PAPER_HOSTS} workers of one core | {hours:,.1f} h | = tokens / (r1 x workers "
            f"x e), r1 = {r1:,.0f} tokens/s ({GCS}, 1 worker), e = {efficiency:.2f} "
            f"({'2 workers / twice 1 worker' if measured else 'assumed: no 2-worker row'}) |"
        )
        one, four = (next(r for r in share if r["processes"] == p) for p in (1, 4))
        per_token = one["max_process_bytes"] / tokens
        fraction = four["max_process_bytes"] / one["max_process_bytes"]
        disk = PAPER_TOKENS * per_token * fraction * 4 / PAPER_HOSTS
        rows.append(
            f"| projection: local bytes per host, {PAPER_TOKENS / 1e9:.1f}B tokens on "
            f"{PAPER_HOSTS} hosts | {disk / 1e9:,.1f} GB | = tokens x h x s x 4 / hosts, h = "
            f"{per_token:.2f} B/token (staged + cached at P = 1), s = {fraction:.3f} (P = 4 "
            "over P = 1) |"
        )
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{len(os.sched_getaffinity(0))} cores; Python {sys.version.split()[0]}")  # fmt: skip
    print("| what | measured | rate or formula |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
