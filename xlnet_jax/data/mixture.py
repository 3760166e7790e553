"""A mixture of prepared corpora: which corpora, their shares of the rows, one tokenizer.

`config.corpus_dir=DIR1,DIR2,...` names several prepared corpora (local or gs://). Each
gets a share p_i of every step's streams:

  - `config.corpus_weights=W1,W2,...`: p_i = W_i / sum(W), each W_i > 0;
  - `config.corpus_alpha=A` (in (0, 1]): p_i proportional to n_i^A over the train splits'
    token counts n_i (temperature sampling as in XLM-R and mT5, A = 0.3 there; A = 1 is
    proportional, a smaller A lifts the small corpora);
  - neither: proportional to the token counts, as if the corpora were one.

Streams, not samples. XLNet's memory needs every row to read one stream from step to step,
so a mixture assigns whole streams to corpora, fixed for the run (streams.py): a row never
changes corpus and its memory is always its true left context. A sampler that draws each
step's sequences from the corpora independently (Grain's MapDataset.mix, nanotron's and
Levanter's weighted datasets) would move a row between corpora, and its memory would be
another text's; the shares are therefore exact per step here, not in expectation.

Rounding (apportion). The streams of one step are split per range block (streams.py: the
n / data_ranges streams of one range), the same way in every block, by largest remainder:
each corpus gets floor(p_i * slots), the slots left go to the largest fractional parts
(the lower index on a tie), and a corpus left with none takes one from the corpus holding
the most. Every corpus has at least one stream per block; fewer slots than corpora is a
one-line error naming the batch.
"""

import hashlib
import json
import math
import os
from collections.abc import Sequence

import numpy as np

from xlnet_jax.data.manifest import Manifest
from xlnet_jax.errors import ConfigError

SEPARATOR = ","


def corpus_dirs(value: str) -> list[str]:
    """The corpus directories that config.corpus_dir names (one, or several comma-separated)."""
    dirs = [part.strip() for part in value.split(SEPARATOR)]
    if len(dirs) > 1 and not all(dirs):
        raise ConfigError(
            f"config.corpus_dir: {value!r} has an empty entry; name each corpus once, "
            "separated by commas: DIR1,DIR2."
        )
    return dirs


def corpus_names(dirs: Sequence[str]) -> list[str]:
    """A short name per corpus, for log lines and `corpus/NAME/loss` metrics: the
    directory's last component, with `-2`, `-3`... for a name met before."""
    names: list[str] = []
    for directory in dirs:
        base = os.path.basename(directory.rstrip("/")) or directory
        name, k = base, 1
        while name in names:
            k += 1
            name = f"{base}-{k}"
        names.append(name)
    return names


def parse_weights(value: str, count: int) -> list[float] | None:
    """config.corpus_weights as numbers (None when empty), one per corpus, each > 0."""
    if not value.strip():
        return None
    try:
        weights = [float(part) for part in value.split(SEPARATOR)]
    except ValueError:
        raise ConfigError(
            f"config.corpus_weights: {value!r} is not a list of numbers; pass one weight per "
            "corpus, e.g. --config.corpus_weights=3,1."
        ) from None
    if len(weights) != count:
        raise ConfigError(
            f"config.corpus_weights: {value!r} has {len(weights)} weight(s) for the {count} "
            f"corpora of config.corpus_dir; pass {count}, in the same order."
        )
    bad = [w for w in weights if not (w > 0 and math.isfinite(w))]
    if bad:
        raise ConfigError(
            f"config.corpus_weights: {bad[0]:g} in {value!r} is not a positive weight; every "
            "corpus needs a weight > 0 (drop a corpus from config.corpus_dir to leave it out)."
        )
    return weights


def shares(tokens: Sequence[int], weights: Sequence[float] | None, alpha: float) -> np.ndarray:
    """p_i: the weights normalised; else n_i^alpha normalised (alpha > 0); else n_i
    normalised. float64 [len(tokens)], summing to 1."""
    n = np.asarray(tokens, dtype=np.float64)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
    elif alpha > 0:
        w = n**alpha
    else:
        w = n
    return w / w.sum()


def apportion(p: np.ndarray, slots: int, what: str) -> np.ndarray:
    """int64 counts summing to `slots`, near p * slots, each >= 1 (module doc: Rounding).

    `what` names the slots for the error, e.g. "the 8 streams of a batch".
    """
    count = len(p)
    if slots < count:
        raise ConfigError(
            f"config.corpus_dir: {count} corpora need at least one stream each, but {what} "
            f"hold {slots}; raise config.batch_size (or lower config.data_ranges), or mix "
            "fewer corpora."
        )
    quota = np.asarray(p, dtype=np.float64) * slots
    counts = np.floor(quota).astype(np.int64)
    order = sorted(range(count), key=lambda i: (-(quota[i] - counts[i]), i))
    for i in order[: slots - int(counts.sum())]:
        counts[i] += 1
    for i in range(count):
        if counts[i] == 0:
            counts[int(np.argmax(counts))] -= 1
            counts[i] = 1
    return counts


def block_counts(
    tokens: Sequence[int],
    weights: Sequence[float] | None,
    alpha: float,
    *,
    global_batch: int,
    bi_data: bool,
    data_ranges: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(p_i, streams of each corpus in one range block): the mixture's layout, as the
    batcher places it and preflight checks it; a block holds the batch's streams (halved
    with bi_data) over data_ranges."""
    p = shares(tokens, weights, alpha)
    num_streams = global_batch // 2 if bi_data else global_batch
    per_block = num_streams // data_ranges
    if len(p) == 1:
        return p, np.array([per_block])
    halved = ", halved with bi_data" if bi_data else ""
    what = (
        f"the {per_block} streams of one range block (batch_size {global_batch}{halved}, "
        f"over data_ranges {data_ranges})"
    )
    return p, apportion(p, per_block, what)


def mixture_fingerprint(fingerprints: Sequence[str]) -> str:
    """A mixture's fingerprint for its checkpoints: one corpus keeps its own; several, a
    sha256 of theirs in order (a resume on other corpora, or in another order, is refused)."""
    if len(fingerprints) == 1:
        return fingerprints[0]
    return hashlib.sha256(json.dumps(list(fingerprints)).encode()).hexdigest()


def tokenizer_difference(first: Manifest, other: Manifest) -> str | None:
    """The one line refusing `other` beside `first` in a mixture, or None when they share
    one tokenizer: the same SentencePiece model, normalisation and word-start rule."""
    differences = [
        ("SentencePiece models (spm.model sha256)",
         first.tokenizer["sha256"][:12], other.tokenizer["sha256"][:12]),
        ("--uncased", first.uncased, other.uncased),
        ("--keep_accents", first.keep_accents, other.keep_accents),
        ("word-start rules", first.word_starts, other.word_starts),
    ]  # fmt: skip
    for what, mine, theirs in differences:
        if mine != theirs:
            return (
                f"config.corpus_dir: {first.path} and {other.path} were prepared with different "
                f"{what}: {mine} vs {theirs}; a mixture needs one tokenizer: prepare "
                f"{other.path} again with `xlnet-jax prepare --spm_model "
                f"{first.path.rstrip('/')}/spm.model` and the first corpus's --uncased and "
                "--keep_accents."
            )
    return None


def mixture_problems(config, manifests: Sequence[Manifest]) -> list[str]:
    """Every problem of config.corpus_weights / corpus_alpha and the corpora's tokenizers,
    one line each (preflight.check_run_from adds them to its round)."""
    problems = []
    for other in manifests[1:]:
        line = tokenizer_difference(manifests[0], other)
        if line:
            problems.append(line)
    if config.corpus_weights.strip() and config.corpus_alpha > 0:
        problems.append(
            f"config.corpus_weights ({config.corpus_weights!r}) and config.corpus_alpha "
            f"({config.corpus_alpha:g}) are both set; pass one of them."
        )
    try:
        parse_weights(config.corpus_weights, len(manifests))
    except ConfigError as e:
        problems.append(str(e))
    return problems


def weights_and_alpha(config) -> tuple[list[float] | None, float]:
    """(parsed corpus_weights or None, corpus_alpha) of a config, for the batcher."""
    count = len(corpus_dirs(config.corpus_dir))
    return parse_weights(config.corpus_weights, count), float(config.corpus_alpha)
