"""prepare's notes: a vocabulary large for the corpus, a validation split too small to
evaluate configs/small.py (issue 32, frictions 2 and 3)."""

import os

from tests.test_data_common import scratch, write_documents
from tests.train_config import small_config
from xlnet_jax.data import prepare_notes
from xlnet_jax.data.prepare import prepare_corpus
from xlnet_jax.data.prepare_notes import TOKENS_PER_PIECE, notes
from xlnet_jax.run.preflight import corpus_problems


def splits(train: int, validation: int | None) -> dict:
    found = {"train": {"tokens": train}}
    if validation is not None:
        found["validation"] = {"tokens": validation}
    return found


def test_the_issue_corpus_gets_both_notes():
    # 32,000 pieces for 450k tokens; 1,083 validation tokens where small.py reads 2,048.
    found = notes(splits(450_000, 1_083), 32_000, validation_need=2_048)
    assert len(found) == 2
    assert "32,000 pieces for 450,000 train tokens, 14 a piece" in found[0]
    assert "--vocab_size (about 4,500" in found[0]
    assert "1,083 tokens, fewer than the 2,048 one evaluation of configs/small.py" in found[1]


def test_no_note_at_the_threshold_or_without_a_validation_split():
    assert notes(splits(TOKENS_PER_PIECE * 2000, 2_048), 2000, validation_need=2_048) == []
    # --validation_fraction 0: nothing held out, nothing to evaluate, nothing to say.
    assert notes(splits(10**6, None), 2000, validation_need=2_048) == []
    assert len(notes(splits(TOKENS_PER_PIECE * 2000 - 1, 2_047), 2000, 2_048)) == 2


def test_the_validation_need_is_what_train_checks_for_small_py():
    """The note's need is preflight's: a split one token short is a train problem too."""
    config = small_config(eval_steps=8, batch_size=8, seq_len=64, reuse_len=32, bi_data=False)
    need = prepare_notes.split_need(config, "validation")
    assert need == 2_048  # configs/small.py's docstring: 8 x 8 streams x 32

    class Short:  # the manifest fields corpus_problems reads
        path, vocab_size, validation_fraction = "corpus", config.vocab_size, 0.02
        splits = {"train": {"tokens": 10**6}, "validation": {"tokens": need - 1}}

    assert len(corpus_problems(config, Short, evaluates=True)) == 1
    Short.splits["validation"]["tokens"] = need
    assert corpus_problems(config, Short, evaluates=True) == []


def test_prepare_prints_the_notes(capsys):
    small = os.path.join(scratch("notes"), "small.txt")
    write_documents(small, [[f"Sentence {i} of a short document."] for i in range(20)])
    prepare_corpus([small], scratch("notes"), vocab_size=36, num_workers=1)
    err = capsys.readouterr().err.splitlines()
    vocab = [line for line in err if line.startswith("Note: the vocabulary is large")]
    validation = [line for line in err if line.startswith("Note: the validation split has")]
    assert len(vocab) == 1 and "36 pieces for" in vocab[0]
    assert len(validation) == 1 and "configs/small.py" in validation[0]
    assert err[-1].startswith("Prepared ")  # the closing line stays the last word
