"""The original's digit-comma split on every path that encodes text: pretraining's prepare
(its worker), the fine-tuning tasks (TextEncoder) and SQuAD's windows (offsets, whose pieces
keep cutting the right characters).

The reference below is the rule of the original XLNet, `prepro_utils.encode_pieces`
(zihangdai/xlnet; transformers 4's slow `XLNetTokenizer._tokenize` has the same), written
here afresh on piece strings as the original does: a piece of more than one character
ending in a digit and "," is encoded again without the word mark and the comma, loses the
leading word mark SentencePiece then adds if the piece had none, and is followed by ",".
"""

import numpy as np
import pytest

from xlnet_jax.data import tokenizer
from xlnet_jax.data.normalize import normalize
from xlnet_jax.finetune.squad import offsets
from xlnet_jax.finetune.text import TextEncoder

MARK = "\u2581"
TEXTS = ["In 1995, 1,000 people", "about 2,500, in 1,250,000 and 7,", "5, 55,5 x9, (3,)"]


def reference_pieces(sp, text: str) -> list[str]:
    """The original's encode_pieces of normalised `text`."""
    out = []
    for piece in sp.encode(text, out_type=str):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            again = sp.encode(piece[:-1].replace(MARK, ""), out_type=str)
            if piece[0] != MARK and again[0][0] == MARK:
                again = again[1:] if len(again[0]) == 1 else [again[0][1:], *again[1:]]
            out += [*again, piece[-1]]
        else:
            out.append(piece)
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A 200-piece vocabulary from text full of numbers before commas: it has pieces that
    end in a digit and ","."""
    rng = np.random.default_rng(0)
    words = "the people in year were there about and city of".split()
    lines = []
    for _ in range(3000):
        number = rng.choice(
            [f"{rng.integers(1900, 2020)},", f"{rng.integers(1, 9)},{rng.integers(0, 999):03d}"]
        )
        line = list(rng.choice(words, 6))
        line.insert(int(rng.integers(0, 6)), number)
        lines.append(" ".join(line))
    path = str(tmp_path_factory.mktemp("spm") / "spiece.model")
    tokenizer.train_tokenizer(lines, path, 200)
    return path, lines


def test_the_vocabulary_has_digit_comma_pieces_and_they_change_the_ids(model):
    path, _ = model
    sp = tokenizer.load_processor(path)
    splits = tokenizer.digit_comma_splits(sp)
    assert len(splits) >= 5 and all(sp.id_to_piece(i)[-1] == "," for i in splits)
    plain = sp.encode(TEXTS[0])
    assert plain != TextEncoder(path).encode(TEXTS[0])  # the split is not a no-op here


def test_every_encoding_path_equals_the_original_rule(model):
    path, lines = model
    sp = tokenizer.load_processor(path)
    texts = TEXTS + lines[:300]
    expected = [[sp.piece_to_id(p) for p in reference_pieces(sp, t)] for t in texts]
    assert TextEncoder(path).encode_many(texts) == expected
    assert [TextEncoder(path).encode(t) for t in TEXTS] == expected[: len(TEXTS)]
    tokenizer.init_worker(path)  # prepare's worker
    ((tokens, lengths),) = tokenizer.encode_documents([texts])
    assert [ids.tolist() for ids in np.split(tokens, np.cumsum(lengths)[:-1])] == expected
    squad = [offsets.tokenize(sp, t, uncased=False).ids.tolist() for t in texts]
    assert squad == expected


def test_squad_pieces_still_cut_their_characters(model):
    path, _ = model
    sp = tokenizer.load_processor(path)
    for text in TEXTS:
        pieces = offsets.tokenize(sp, "  " + text.replace(" ", " \t "), uncased=False)
        spaced = "  " + text.replace(" ", " \t ")
        for i, start, end in zip(pieces.ids, pieces.start, pieces.end, strict=True):
            piece = sp.id_to_piece(int(i)).replace(MARK, "")
            if i != tokenizer.SPECIAL_IDS["<unk>"]:
                assert spaced[start:end] == piece, (text, sp.id_to_piece(int(i)))
        covered = "".join(spaced[s:e] for s, e in zip(pieces.start, pieces.end, strict=True))
        assert covered == normalize(text, uncased=False).replace(" ", "")
