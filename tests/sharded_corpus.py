"""A test corpus in 8 shards per split, for the data-range tests (prepared once per session).

`prepare --num_shards 8` (capped by the documents a split holds): the corpus is what
`xlnet-jax prepare` writes.
"""

import functools
import os

from tests.test_data_common import english_text, scratch
from xlnet_jax.data.prepare import prepare_corpus

SHARDS = 8


@functools.cache
def sharded_corpus() -> str:
    """The English text, 500 pieces, 20% held out (>= 8 documents), 8 shards per split."""
    out = os.path.join(scratch("sharded"), "corpus")
    prepare_corpus(
        [english_text()],
        out,
        vocab_size=500,
        validation_fraction=0.2,
        num_workers=1,
        num_shards=SHARDS,
    )
    return out
