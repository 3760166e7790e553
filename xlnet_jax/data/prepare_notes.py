"""The notes `prepare` prints after a corpus is written: what the first `train` would find.

Two, each one line, each only when it applies:
  * the vocabulary is large for the corpus: fewer than TOKENS_PER_PIECE train tokens per
    piece, so an average piece's embedding and output row are trained on few occurrences
    (SentencePiece accepts a vocabulary up to about the corpus's distinct words, e.g.
    32,000 pieces for 450k tokens, 14 a piece);
  * the validation split is smaller than one evaluation of configs/small.py reads
    (split_need: eval_steps batches of streams x reuse_len tokens), which `train` would
    otherwise report only once it starts.

`split_need` is also what `train`'s preflight checks each split against (run/preflight.py).
"""

import importlib.util
import os
import sys

import ml_collections

from xlnet_jax.data.manifest import Manifest

# Below this many train tokens per vocabulary piece, prepare says the vocabulary is large.
# A judgement, not a measured optimum: the released XLNet trained 32,000 pieces on ~33B
# tokens (about a million a piece), the demo's 2,000 pieces get ~240 a piece, the issue's
# 32,000 on 450k tokens 14. benchmarks/vocab_guidance.py: at 20-24 tokens a piece 58-61% of
# the pieces occur fewer than 10 times, in Chinese, Japanese, Korean and English alike; at
# about 100 or more, 0-20% (37% for Japanese, whose kanji each need a piece).
TOKENS_PER_PIECE = 100
# The config whose evaluation the validation split is checked against: the own-text one.
EVAL_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "small.py")


def split_need(config: ml_collections.ConfigDict, split: str) -> int:
    """Tokens `split` must hold: one batch of streams for train, eval_steps for validation.

    Every stream of a batch starts reuse_len tokens apart in the split's ring of tokens
    and reads a row of seq_len; an evaluation advances each stream eval_steps times, and
    a smaller split would score the same text twice.
    """
    streams = config.batch_size // 2 if config.bi_data else config.batch_size
    steps = config.eval_steps if split == "validation" else 1
    return max(streams * config.reuse_len * steps, 2 * config.seq_len)


def notes(
    splits: dict, vocab_size: int, validation_need: int, config_name: str = "configs/small.py"
) -> list[str]:
    """The notes for a corpus of `splits` (the manifest's) and a vocabulary of vocab_size.

    Args:
      splits: split name -> {"tokens", ...}, as in manifest.json.
      vocab_size: pieces of the tokenizer.
      validation_need: validation tokens one evaluation of `config_name` reads.
      config_name: the config named in the validation note.
    """
    found = []
    train = splits.get("train", {}).get("tokens", 0)
    if train < TOKENS_PER_PIECE * vocab_size:
        suggested = max(100, train // TOKENS_PER_PIECE // 100 * 100)
        found.append(
            f"Note: the vocabulary is large for this corpus: {vocab_size:,} pieces for "
            f"{train:,} train tokens, {train / vocab_size:.0f} a piece (fewer than "
            f"{TOKENS_PER_PIECE}); a smaller --vocab_size (about {suggested:,}, at least the "
            "characters the text needs) or more text trains each piece more often."
        )
    validation = splits.get("validation", {}).get("tokens", 0)
    if "validation" in splits and validation < validation_need:  # absent: nothing held out
        found.append(
            f"Note: the validation split has {validation:,} tokens, fewer than the "
            f"{validation_need:,} one evaluation of {config_name} reads; prepare with a larger "
            "--validation_fraction, or train with a smaller --config.eval_steps."
        )
    return found


def print_notes(manifest: Manifest) -> None:
    """Prints notes() for the corpus against configs/small.py (when this is a checkout that
    has it) on stderr, beside prepare's other messages."""
    need = None
    if os.path.isfile(EVAL_CONFIG):
        spec = importlib.util.spec_from_file_location("_xlnet_small_config", EVAL_CONFIG)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        need = split_need(module.get_config(), "validation")
    found = notes(manifest.splits, manifest.vocab_size, need or 0)
    for line in found:
        print(line, file=sys.stderr)
