"""One path layer for local directories and object storage (`gs://`): etils epath.

epath picks gcsfs (through fsspec) for `gs://` when tensorflow is absent, the same backend
orbax uses for its metadata; orbax writes the arrays through tensorstore's own gcs
driver. Local paths are made absolute, so a `gs://` path is never mistaken for a relative
local directory named `gs:`.

Object storage has no appends, renames or locks: the callers that need them (metrics,
the workdir lock, the corpus) use whole-object writes, generation preconditions
(object_lease.py) and local staging (data/staging.py) instead.
"""

import os
import shutil

import fsspec
from etils import epath

# Where a host keeps local copies of remote things: staged corpora, metric mirrors.
CACHE_ENV = "XLNET_JAX_CACHE_DIR"


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URL (gs://...) rather than a local path."""
    return "://" in os.fspath(path)


def as_path(path: str | os.PathLike) -> epath.Path:
    """`path` as an epath.Path: a URL as is, a local path made absolute."""
    text = os.fspath(path)
    return epath.Path(text if is_remote(text) else os.path.abspath(text))


def local_cache(*parts: str) -> str:
    """A directory on this host's disk for local copies, $XLNET_JAX_CACHE_DIR or ~/.cache."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "xlnet-jax")
    directory = os.path.join(root, *parts)
    os.makedirs(directory, exist_ok=True)
    return directory


def write_bytes_atomic(path: epath.Path, data: bytes) -> None:
    """Writes `path` so that readers see the old or the new content, never a part.

    Local: a temporary file renamed over the target. Object storage: one upload, which
    GCS makes visible only once complete.
    """
    if is_remote(path):
        path.write_bytes(data)
        return
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def move_tree(source: epath.Path, target: epath.Path) -> None:
    """Moves a directory; on object storage a copy of each object, then their deletion."""
    if is_remote(source):
        fs, path = fsspec.core.url_to_fs(os.fspath(source))
        fs.mv(path, fsspec.core.url_to_fs(os.fspath(target))[1], recursive=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(source, target)
