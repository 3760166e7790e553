"""The prepared corpus as a tfds dataset in array_record format, written and read without
tensorflow.

One example per document: `tokens` (int32 ids, without the <eod> that the streams add) and
`sentence_lengths` (int32, summing to len(tokens)): the sentence boundaries that A and B
are cut at. Shuffling is disabled so documents keep their corpus order, which the
contiguous streams need. shard_writer.py writes the shards and this DatasetInfo;
reading needs only the directory (`tfds.builder_from_directory`). tfds is imported by the
functions that use it: a run whose corpus is cached (corpus.py) starts without it.
"""

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from xlnet_jax.errors import DataError

if TYPE_CHECKING:
    import tensorflow_datasets as tfds

NAME = "xlnet_corpus"
VERSION = "1.0.0"

Document = tuple[np.ndarray, np.ndarray]  # (tokens, sentence_lengths), both int32


def features() -> "tfds.features.FeaturesDict":
    """One document: its tokens and its sentences' lengths."""
    import tensorflow_datasets as tfds

    return tfds.features.FeaturesDict(
        {
            "tokens": tfds.features.Tensor(shape=(None,), dtype=np.int32),
            "sentence_lengths": tfds.features.Tensor(shape=(None,), dtype=np.int32),
        }
    )


def dataset_info(data_dir: str) -> "tfds.core.DatasetInfo":
    """The corpus's DatasetInfo, without splits, for metadata written to data_dir (built
    from an identity, not a builder: a builder looks for metadata and leaves a
    temporary directory behind)."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import dataset_info as dataset_info_lib

    identity = dataset_info_lib.DatasetIdentity(
        name=NAME, version=tfds.core.Version(VERSION), data_dir=data_dir, module_name=__name__
    )
    info = tfds.core.DatasetInfo(
        builder=identity,
        description="Tokenized documents for XLNet pretraining (written by xlnet-jax prepare).",
        features=features(),
        disable_shuffling=True,
    )
    info.set_file_format("array_record")
    return info


def dataset_dir(corpus_dir: str) -> str:
    """Where the dataset of a prepared corpus is (shard_writer.py writes it)."""
    return os.path.join(corpus_dir, NAME, VERSION)


def open_builder(corpus_dir: str) -> "tfds.core.DatasetBuilder":
    """The prepared corpus's tfds builder; a DataError when it is missing or broken."""
    import tensorflow_datasets as tfds

    try:
        return tfds.builder_from_directory(dataset_dir(corpus_dir))
    except Exception as e:  # tfds raises several types for a missing or broken directory
        raise DataError(
            f"{corpus_dir} holds no readable corpus dataset ({type(e).__name__}); run "
            "`xlnet-jax prepare` into it again."
        ) from None


def read_documents(corpus_dir: str, split: str, batch: int = 512) -> Iterator[Document]:
    """A split's documents in corpus order, through tfds's random-access data source."""
    builder = open_builder(corpus_dir)
    if split not in builder.info.splits:
        raise DataError(
            f"Corpus {corpus_dir} has no {split!r} split (it has "
            f"{sorted(builder.info.splits.keys())}). Prepare it with a validation_fraction > 0 "
            "to get a validation split."
        )
    source = builder.as_data_source(split=split)
    for start in range(0, len(source), batch):
        for example in source.__getitems__(list(range(start, min(start + batch, len(source))))):
            yield example["tokens"], example["sentence_lengths"]
