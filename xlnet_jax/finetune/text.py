"""Text to token ids as the pretrained model saw text: its normalisation, then its pieces
(SentencePiece's, with the original's digit-comma split: data/tokenizer.py)."""

import dataclasses

from xlnet_jax.data import tokenizer
from xlnet_jax.data.normalize import normalize


@dataclasses.dataclass
class TextEncoder:
    """A SentencePiece model with the normalisation its corpus was prepared with.

    Attributes:
      model_path: the .model file (XLNet's special pieces at their fixed ids).
      uncased, keep_accents: the corpus's normalisation options.
    """

    model_path: str
    uncased: bool = False
    keep_accents: bool = False

    def __post_init__(self):
        self._sp = tokenizer.load_processor(self.model_path)
        tokenizer.check_special_ids(self._sp, self.model_path)
        self._splits = tokenizer.digit_comma_splits(self._sp)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of one text (no special tokens)."""
        return self.encode_many([text])[0]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of each text, in one SentencePiece call."""
        normalized = [
            normalize(t, uncased=self.uncased, keep_accents=self.keep_accents) for t in texts
        ]
        return tokenizer.encode_texts(self._sp, normalized, self._splits)
