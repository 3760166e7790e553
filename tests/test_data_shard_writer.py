"""shard_writer: shards of equal document counts in corpus order, and a dataset that holds
exactly the shards its writers reported."""

import os

import numpy as np
import pytest
from test_data_common import scratch

from xlnet_jax.data import shard_writer, tfds_builder
from xlnet_jax.errors import DataError


def documents(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (np.arange(i, 2 * i + 3, dtype=np.int32), np.array([1, i + 2], dtype=np.int32))
        for i in range(count)
    ]


def test_a_split_is_cut_into_equal_shards_and_reads_back_in_order():
    out, docs = scratch("shards"), documents(10)
    records = shard_writer.write_split(out, "train", iter(docs), len(docs), num_shards=4)
    assert [r.documents for r in records] == [3, 2, 3, 2]  # rank r -> shard r * 4 // 10
    files = shard_writer.finish_dataset(out, {"train": records})
    assert sorted(files) == sorted(
        [r.relative for r in records]
        + [f"{tfds_builder.NAME}/{tfds_builder.VERSION}/{n}" for n in ("dataset_info.json",
                                                                       "features.json")]
    )  # fmt: skip
    got = [(t.tolist(), n.tolist()) for t, n in tfds_builder.read_documents(out, "train")]
    assert got == [(t.tolist(), n.tolist()) for t, n in docs]
    few = shard_writer.write_split(scratch("few"), "train", iter(docs[:2]), 2, num_shards=64)
    assert len(few) == 2  # no empty shard


def test_a_missing_or_unexpected_shard_is_named_and_a_temporary_one_removed():
    out, docs = scratch("check"), documents(6)
    records = shard_writer.write_split(out, "train", iter(docs), len(docs), num_shards=3)
    with pytest.raises(DataError, match=r"did not report shard\(s\) \['xlnet_corpus/1.0.0/"
                       r"xlnet_corpus-train.array_record-00001-of-00003'\]"):  # fmt: skip
        shard_writer.finish_dataset(out, {"train": [records[0], records[2]]})
    folder = os.path.join(out, tfds_builder.NAME, tfds_builder.VERSION)
    stray = os.path.join(folder, "xlnet_corpus-train.array_record-00003-of-00004")
    open(stray, "wb").close()
    leftover = os.path.join(folder, "xlnet_corpus-train.array_record-00000-of-00003.tmp-1")
    open(leftover, "wb").close()
    with pytest.raises(DataError, match=r"unexpected \['xlnet_corpus/1.0.0/xlnet_corpus-train"
                       r".array_record-00003-of-00004'\]"):  # fmt: skip
        shard_writer.finish_dataset(out, {"train": records})
    assert not os.path.exists(leftover)
    os.remove(stray)
    shard_writer.finish_dataset(out, {"train": records})
