"""The corpus's array_record shards and tfds metadata, written wherever the corpus lives.

array_record writes local files only (no release up to 0.8.6 writes gs://), so each shard
is written to the writer's own local temporary file, then committed to the corpus
directory: locally by a rename; on object storage by an upload under a temporary name
(retried through paths.retry, as checkpoints are), a copy to the final name and the
temporary object's deletion; the local file is deleted either way. A shard's name and
bytes are functions of its documents (records serialized deterministically), so a
retried writer (a Beam bundle run again, a worker that died mid-upload) commits the same
object again, never a second one.

Shards: documents in corpus (key) order, the split cut into `count` shards of equal
document counts (document of rank r goes to shard r * count // documents). The driver
writes the tfds metadata (dataset_info.json, features.json) last, from what the writers
report (ShardRecord), after finish_dataset has checked that exactly the expected shards
are there and removed any temporary object a failed writer left behind. The layout is
tfds's own, read by tfds.builder_from_directory as before.
"""

import dataclasses
import hashlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable

import fsspec
import tensorflow_datasets as tfds
from array_record.python.array_record_module import ArrayRecordWriter
from tensorflow_datasets.core import example_serializer

from xlnet_jax import paths
from xlnet_jax.data import tfds_builder
from xlnet_jax.errors import DataError

NUM_SHARDS = 64  # per split by default: enough for data_ranges up to 64 hosts
_TEMP_MARK = ".tmp-"  # in the name of an object or file not yet committed
_SUFFIX = "array_record"


@dataclasses.dataclass(frozen=True)
class ShardRecord:
    """What a writer committed: the shard's path relative to the corpus directory, its
    documents, the bytes of its serialized records (tfds's num_bytes), its file's size and
    sha256 (the manifest's `files` entry)."""

    relative: str
    documents: int
    record_bytes: int
    file_bytes: int
    sha256: str


def shard_count(documents: int, requested: int) -> int:
    """Shards of a split of `documents`: `requested`, but no empty one."""
    return max(1, min(requested, documents))


def shard_of(rank: int, documents: int, count: int) -> int:
    """The shard of the document of corpus rank `rank` in a split of `documents`."""
    return rank * count // documents


def shard_relative(split: str, index: int, count: int) -> str:
    """Shard `index` of `count` of `split`, relative to the corpus directory (tfds's name)."""
    name = f"{tfds_builder.NAME}-{split}.{_SUFFIX}-{index:05d}-of-{count:05d}"
    return os.path.join(tfds_builder.NAME, tfds_builder.VERSION, name)


def write_split(
    out_dir: str,
    split: str,
    documents: Iterable[tfds_builder.Document],
    total: int,
    num_shards: int,
) -> list[ShardRecord]:
    """One process: the split's `total` documents (in corpus order) as its shards, one
    after another."""
    count = shard_count(total, num_shards)
    docs = iter(documents)
    first = [-(-i * total // count) for i in range(count + 1)]  # rank of each shard's first
    return [
        write_shard(out_dir, split, i, count, itertools.islice(docs, first[i + 1] - first[i]))
        for i in range(count)
    ]


def write_shard(
    out_dir: str, split: str, index: int, count: int, documents: Iterable[tfds_builder.Document]
) -> ShardRecord:
    """Writes the documents (in corpus order) as shard `index` of `count` of `split` in
    out_dir (local or gs://) through a local temporary file; returns what it committed."""
    features = tfds_builder.features()
    serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
    fd, local = tempfile.mkstemp(prefix="xlnet-shard-", suffix=_TEMP_MARK + _SUFFIX)
    os.close(fd)
    try:
        writer = ArrayRecordWriter(local, "group_size:1")  # tfds's options
        docs = record_bytes = 0
        for tokens, lengths in documents:
            example = {"tokens": tokens, "sentence_lengths": lengths}
            proto = serializer.get_tf_example(features.encode_example(example))
            # deterministic: the map of features in key order, so equal documents give
            # equal bytes in any process (the default order varies between processes)
            record = proto.SerializeToString(deterministic=True)
            writer.write(record)
            docs, record_bytes = docs + 1, record_bytes + len(record)
        writer.close()
        with open(local, "rb") as f:
            sha256 = hashlib.file_digest(f, "sha256").hexdigest()
        relative = shard_relative(split, index, count)
        _commit(local, os.path.join(out_dir, relative))
        return ShardRecord(relative, docs, record_bytes, os.path.getsize(local), sha256)
    finally:
        os.remove(local)


def _commit(local: str, target: str) -> None:
    """Puts the local file at `target`: whole or not at all, under its final name only
    once complete."""
    if not paths.is_remote(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = f"{target}{_TEMP_MARK}{uuid.uuid4().hex}"
        shutil.copyfile(local, temporary)  # the temporary directory may be another disk
        os.replace(temporary, target)
        return
    fs, target_path = fsspec.core.url_to_fs(target)

    def upload() -> str:
        temporary = f"{target_path}{_TEMP_MARK}{uuid.uuid4().hex}"  # a new name each try
        fs.put_file(local, temporary)
        return temporary

    temporary = paths.retry(upload, f"uploading {target} (as a temporary object)")
    paths.retry(lambda: fs.copy(temporary, target_path), f"committing {target}")
    paths.retry(lambda: _remove(fs, temporary), f"deleting the temporary copy of {target}")


def _remove(fs, path: str) -> None:
    try:
        fs.rm(path)
    except FileNotFoundError:
        pass  # a retry after a delete whose reply was lost


def finish_dataset(out_dir: str, shards: dict[str, list[ShardRecord]]) -> dict[str, dict]:
    """Checks that out_dir's dataset holds exactly the shards the writers reported,
    deletes temporary leftovers, writes the tfds metadata; returns the manifest's `files`.

    shards: split -> its ShardRecords (any order). A missing or unexpected shard is a
    DataError naming it.
    """
    expected = {}
    for split, records in shards.items():
        records = sorted(records, key=lambda r: r.relative)
        count = max(int(r.relative.rsplit("-of-", 1)[1]) for r in records)  # in every name
        wanted = {shard_relative(split, i, count) for i in range(count)}
        if {r.relative for r in records} != wanted:
            missing = sorted(wanted - {r.relative for r in records})
            raise DataError(
                f"The {split!r} split's writers did not report shard(s) {missing[:3]} of "
                f"{count}; the corpus in {out_dir} is incomplete: prepare it again."
            )
        expected.update({r.relative: r for r in records})
    present = _dataset_entries(out_dir)
    leftovers = [name for name in present if _TEMP_MARK in name]
    for relative in leftovers:
        _delete(out_dir, relative)
    present = [name for name in present if _TEMP_MARK not in name]
    missing = sorted(set(expected) - set(present))
    extra = sorted(set(present) - set(expected))
    if missing or extra:
        raise DataError(
            f"{out_dir} does not hold the shards its writers committed: missing "
            f"{missing[:3] or 'none'}, unexpected {extra[:3] or 'none'}. Prepare it again "
            "into an empty directory."
        )
    files = {r: {"bytes": s.file_bytes, "sha256": s.sha256} for r, s in expected.items()}
    files.update(_write_metadata(out_dir, shards))
    return dict(sorted(files.items()))


def _dataset_entries(out_dir: str) -> list[str]:
    """Every file under out_dir's dataset directory, relative to out_dir."""
    return [
        os.path.join(tfds_builder.NAME, r) for r in list_files(f"{out_dir}/{tfds_builder.NAME}")
    ]


def list_files(directory: str) -> list[str]:
    """Every file under `directory` (local or gs://), relative to it, listed afresh: other
    processes wrote there, and gcsfs would otherwise answer from its listing cache."""
    if not paths.is_remote(directory):
        return [
            os.path.relpath(os.path.join(folder, name), directory)
            for folder, _, names in os.walk(directory)
            for name in names
        ]
    fs, root = fsspec.core.url_to_fs(directory)
    root = root.rstrip("/")

    def listing() -> list[str]:
        fs.invalidate_cache()
        try:
            return [path[len(root) + 1 :] for path in fs.find(root)]
        except FileNotFoundError:
            return []

    return paths.retry(listing, f"listing {directory}")


def _delete(out_dir: str, relative: str) -> None:
    target = os.path.join(out_dir, relative)
    if not paths.is_remote(target):
        os.remove(target)
        return
    fs, path = fsspec.core.url_to_fs(target)
    paths.retry(lambda: _remove(fs, path), f"deleting {target}")


def _write_metadata(out_dir: str, shards: dict[str, list[ShardRecord]]) -> dict[str, dict]:
    """dataset_info.json and features.json for the splits, written locally by tfds, then
    put in the dataset directory; their manifest `files` entries."""
    splits = []
    for split, records in shards.items():
        records = sorted(records, key=lambda r: r.relative)
        splits.append(
            tfds.core.SplitInfo(
                name=split,
                shard_lengths=[r.documents for r in records],
                num_bytes=sum(r.record_bytes for r in records),
            )
        )
    files = {}
    with tempfile.TemporaryDirectory() as local:
        info = tfds_builder.dataset_info(local)
        info.set_splits(tfds.core.SplitDict(splits))
        info.write_to_directory(local)
        for name in sorted(os.listdir(local)):
            with open(os.path.join(local, name), "rb") as f:
                data = f.read()
            relative = os.path.join(tfds_builder.NAME, tfds_builder.VERSION, name)
            target = paths.as_path(out_dir) / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            paths.write_bytes_atomic(target, data)
            files[relative] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return files


def hosts_line(files: dict[str, dict]) -> str:
    """prepare's line saying how many hosts the corpus serves a share each."""
    shards = {}
    for relative in files:
        name = os.path.basename(relative)
        if f".{_SUFFIX}-" in name:
            split = name[len(tfds_builder.NAME) + 1 : name.index(f".{_SUFFIX}-")]
            shards[split] = shards.get(split, 0) + 1
    counts = ", ".join(f"{n} {split}" for split, n in sorted(shards.items(), key=_train_first))
    hosts = shards.get("train", 1)
    return (
        f"Shards: {counts}. A run on up to {hosts} host(s) stages and caches only each "
        "host's share of the train split (config.data_ranges, by default the process "
        "count); a split of fewer shards than ranges is read whole (--num_shards sets the "
        "shards a split)."
    )


def _train_first(item: tuple[str, int]) -> tuple[bool, str]:
    return item[0] != "train", item[0]
