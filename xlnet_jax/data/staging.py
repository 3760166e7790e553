"""A prepared corpus on object storage: published from a local preparation, staged to read.

A `gs://` corpus is copied to each host's disk before training: its small files at the
start (stage_corpus), then only the shards that the process's rows read (stage_files, from
corpus.load_split), so a host holds its share of the corpus, not all of it. (array_record
0.8.6 can open gs:// shards itself, through riegeli's GCS reader; staging is kept because
every staged file is checked against the sha256 the manifest records for it, and the
cache the streams read is built once per host anyway.) A file already staged with the
right hash is not downloaded again, so a restarted run on the same host starts at once.
Downloads retry transient faults (paths.retry), and a file that arrives with another
sha256 (damaged or cut short on the way) is fetched again, up to FETCHES times, before it
is reported.

Publishing (a copy of a local corpus) uploads the manifest last: it marks a complete
corpus, so a reader never sees a half-uploaded one as prepared.
"""

import dataclasses
import hashlib
import logging
import os
import re
from collections.abc import Sequence
from typing import BinaryIO

from xlnet_jax import paths
from xlnet_jax.data import tfds_builder
from xlnet_jax.data.manifest import (
    MANIFEST_FILE,
    TOKENIZER_FILE,
    Manifest,
    file_sha256,
    manifest_fingerprint,
    save_manifest,
)
from xlnet_jax.errors import DataError

log = logging.getLogger(__name__)

_OWNED = (MANIFEST_FILE, TOKENIZER_FILE, tfds_builder.NAME)
FETCHES = 3  # downloads of one file whose sha256 differs before it counts as changed
ORIGIN_FILE = "staged_from"  # in a staged copy: the remote corpus it was staged from
SHARD = re.compile(r"\.array_record-\d+-of-\d+$")  # a tfds shard file, staged on demand


def stage_corpus(manifest: Manifest) -> Manifest:
    """A local, verified copy of the small files of the remote corpus `manifest` describes
    (tokenizer, dataset metadata); its manifest. The shards (array_record files) follow on
    demand, only those a process reads (stage_files, called by corpus.load_split)."""
    if not manifest.files:
        raise DataError(
            f"{manifest.path}/{MANIFEST_FILE} lists no file hashes (prepared by an older "
            "version), so a staged copy cannot be verified; prepare the corpus again."
        )
    local = paths.local_cache("corpora", manifest_fingerprint(manifest)[:16])
    small = [relative for relative in manifest.files if not SHARD.search(relative)]
    wanted = {
        **{relative: manifest.files[relative]["sha256"] for relative in small},
        manifest.tokenizer["file"]: manifest.tokenizer["sha256"],
    }
    _stage(paths.as_path(manifest.path), local, wanted)
    with open(os.path.join(local, ORIGIN_FILE), "w") as f:
        f.write(manifest.path)
    staged = dataclasses.replace(manifest, path=local)
    save_manifest(staged)
    return staged


def stage_files(manifest: Manifest, relatives: Sequence[str]) -> None:
    """Makes the corpus files `relatives` present and verified in `manifest.path`.

    A corpus staged by stage_corpus downloads those missing from where it was staged from;
    any other corpus holds all its files already.
    """
    origin = os.path.join(manifest.path, ORIGIN_FILE)
    if not os.path.exists(origin):
        return
    with open(origin) as f:
        remote = paths.as_path(f.read())
    wanted = {relative: manifest.files[relative]["sha256"] for relative in relatives}
    _stage(remote, manifest.path, wanted)


def _stage(remote, local: str, wanted: dict[str, str]) -> None:
    """Downloads each {relative path: sha256} in `wanted` from `remote` to `local`, unless
    a copy with that sha256 is there already."""
    fetched = fetched_bytes = 0
    for relative, sha256 in wanted.items():
        target = os.path.join(local, relative)
        if os.path.exists(target) and file_sha256(target) == sha256:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        size = _fetch(remote / relative, target, sha256)
        fetched, fetched_bytes = fetched + 1, fetched_bytes + size
    log.info(
        "Corpus %s staged at %s: %d of %d files downloaded (%.1f MiB), all %d verified against "
        "the manifest's sha256.",
        remote,
        local,
        fetched,
        len(wanted),
        fetched_bytes / 2**20,
        len(wanted),
    )


def _fetch(source, target: str, sha256: str) -> int:
    """Downloads `source` to `target` (atomically) if its sha256 is `sha256`; its size."""
    tmp = f"{target}.{os.getpid()}.tmp"

    def download() -> tuple[str, int]:
        with source.open("rb") as remote, open(tmp, "wb") as copy:
            return _copy(remote, copy)

    for fetch in range(1, FETCHES + 1):
        digest, size = paths.retry(download, f"downloading {source}")
        if digest == sha256:
            os.replace(tmp, target)  # atomic: another process on this host may stage too
            return size
        log.warning("%s arrived with another sha256 (fetch %d of %d).", source, fetch, FETCHES)
    os.remove(tmp)
    raise DataError(
        f"{source}: its sha256 differs from the one in {MANIFEST_FILE} in {FETCHES} downloads; "
        "the corpus was changed or damaged after preparing. Prepare it again."
    )


def claim_remote(out_dir: str) -> None:
    """Empties a remote out_dir of a previous corpus (and of a failed preparation's
    temporary folder); refuses one holding anything else."""
    root = paths.as_path(out_dir)
    if not root.exists():
        return
    entries = [p.name for p in root.iterdir()]
    foreign = sorted(e for e in set(entries) - set(_OWNED) - {"cache"} if e[0] != ".")
    if foreign:
        raise DataError(
            f"{out_dir} is not empty and not a prepared corpus (it holds {foreign[:3]}...); "
            "pick a new or empty directory."
        )
    if MANIFEST_FILE in entries:  # first, so the old corpus no longer reads as complete
        (root / MANIFEST_FILE).unlink()
    for name in entries:
        path = root / name
        if path.is_dir():
            path.rmtree()
        elif path.exists():
            path.unlink()


def publish(local: str, out_dir: str) -> None:
    """Uploads a corpus prepared in the local directory `local` to `out_dir` (a copy of a
    corpus; `prepare --out gs://...` writes there directly), manifest.json last."""
    claim_remote(out_dir)
    root = paths.as_path(out_dir)
    relatives = [
        os.path.relpath(os.path.join(directory, name), local)
        for directory, _, names in os.walk(local)
        for name in names
    ]
    for relative in sorted(relatives, key=lambda r: r == MANIFEST_FILE):
        if relative.split(os.sep)[0] == "cache":
            continue

        def upload(relative: str = relative) -> None:
            with (
                open(os.path.join(local, relative), "rb") as source,
                (root / relative).open("wb") as copy,
            ):
                _copy(source, copy)

        paths.retry(upload, f"uploading {root / relative}")
    log.info("Published the corpus to %s (%d files).", out_dir, len(relatives))


def _copy(source: BinaryIO, target: BinaryIO) -> tuple[str, int]:
    """Copies in 16 MiB blocks; the sha256 and size of what was copied."""
    digest, size = hashlib.sha256(), 0
    while block := source.read(16 * 2**20):
        digest.update(block)
        target.write(block)
        size += len(block)
    return digest.hexdigest(), size
