"""A test corpus in 8 shards per split, for the data-range tests (prepared once per session).

tfds picks one shard for a dataset under 128 MiB of records, so the English test text is
prepared with tfds's shard count pinned (capped by the documents a split holds):
`ShardConfig.calculate_number_shards` is tfds's own rule, which `prepare_corpus` reaches
through `download_and_prepare`. The corpus is otherwise what `xlnet-jax prepare` writes.
"""

import contextlib
import functools
import os
from collections.abc import Iterator
from unittest import mock

from tensorflow_datasets.core.utils import shard_utils

from tests.test_data_common import english_text, scratch
from xlnet_jax.data.prepare import prepare_corpus

SHARDS = 8


@contextlib.contextmanager
def pinned_shards(shards: int) -> Iterator[None]:
    """Inside the block, tfds writes each split in `shards` shards (fewer for a split of
    fewer documents)."""
    rule = classmethod(lambda cls, size, examples, *args, **kwargs: min(shards, examples))
    with mock.patch.object(shard_utils.ShardConfig, "calculate_number_shards", rule):
        yield


@functools.cache
def sharded_corpus() -> str:
    """The English text, 500 pieces, 20% held out (>= 8 documents), 8 shards per split."""
    out = os.path.join(scratch("sharded"), "corpus")
    with pinned_shards(SHARDS):
        prepare_corpus(
            [english_text()], out, vocab_size=500, validation_fraction=0.2, num_workers=1
        )
    return out
