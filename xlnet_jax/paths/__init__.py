"""One path layer for local directories and object storage (`gs://`): etils epath.

epath picks gcsfs (through fsspec) for `gs://` when tensorflow is absent, the same backend
orbax uses for its metadata; orbax writes the arrays through tensorstore's own gcs
driver. Local paths are made absolute, so a `gs://` path is never mistaken for a relative
local directory named `gs:`.

Object storage has no appends, renames or locks: the callers that need them (metrics,
the workdir lock, the corpus) use whole-object writes, generation preconditions
(run/lease.py) and local staging (data/staging.py) instead.

The first remote path this process meets (`is_remote`) readies storage, once: gcsfs's
listing cache off, and its requests under the one retry policy (gcsfs_adapter.py, which
holds every use of gcsfs's private names; library.py, the check they pass first).
gcsfs and its HTTP stack are imported there and then, not with this module: a run on
local paths starts without them (about a second less per process).
Imports errors only.
"""

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import itertools
import logging
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from etils import epath

from xlnet_jax.errors import ConfigError, StorageError, one_line

log = logging.getLogger(__name__)
T = TypeVar("T")

# Where a host keeps local copies of remote things: staged corpora, metric mirrors.
CACHE_ENV = "XLNET_JAX_CACHE_DIR"


def use_storage() -> None:
    """Readies this process for object storage, once; `is_remote` calls it.

    Every answer about a gs:// path comes from storage, not from a listing this process
    cached: etils keeps one gcsfs filesystem per process, and gcsfs's listing cache never
    expires, so after another writer (tensorstore writing the arrays, another host, another
    run) changed a folder, exists() answered False for a committed step and a read stopped
    at the old size. fsspec applies its configuration to every gcsfs filesystem made after
    this (etils' included), under either of gcsfs's protocol names, over any $FSSPEC_GS /
    $FSSPEC_GCS. Each request gcsfs sends then retries under the policy
    (`_under_policy`).
    """
    import fsspec

    from xlnet_jax.paths import gcsfs_adapter

    for protocol in ("gs", "gcs"):
        fsspec.config.conf.setdefault(protocol, {})["use_listings_cache"] = False
    gcsfs_adapter.replace_requests(_under_policy)


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URL (gs://...) rather than a local path; the first URL readies
    storage (use_storage)."""
    remote = "://" in os.fspath(path)
    if remote:
        use_storage()
    return remote


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
        retry(lambda: path.write_bytes(data), f"writing {path}")
        return
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def local_copy(path: str | os.PathLike) -> Iterator[str]:
    """A local path with `path`'s content, for a library that opens only local files
    (transformers' from_pretrained): a local path as it is; a remote file or directory
    (its files, recursively) copied into a temporary directory, removed on exit."""
    source = as_path(path)
    if not is_remote(source):
        yield os.fspath(source)
        return
    with tempfile.TemporaryDirectory(prefix="xlnet-jax-staged-") as scratch:
        target = os.path.join(scratch, source.name or "staged")
        _copy_down(source, target)
        yield target


def _copy_down(source: epath.Path, target: str) -> None:
    """`source` (a file, or a directory walked folder by folder: gs:// has no `**` glob)
    copied to the local `target`."""
    if not source.is_dir():
        data = retry(source.read_bytes, f"reading {source}")
        with open(target, "wb") as f:
            f.write(data)
        return
    os.makedirs(target, exist_ok=True)
    for item in source.iterdir():
        _copy_down(item, os.path.join(target, item.name))


def move_tree(source: epath.Path, target: epath.Path) -> None:
    """Moves a directory; on object storage a copy of each object, then their deletion."""
    if is_remote(source):
        import fsspec

        fs, path = fsspec.core.url_to_fs(os.fspath(source))
        fs.mv(path, fsspec.core.url_to_fs(os.fspath(target))[1], recursive=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(source, target)


# The one retry policy for object storage, in every layer:
# - each HTTP request gcsfs makes (epath's gs:// backend; orbax's metadata) is retried by
#   `_under_policy` below, in place of gcsfs's fixed 6 tries;
# - tensorstore's gcs driver (orbax's arrays) gets the same attempts and delays
#   (checkpoint/tensorstore_adapter.py);
# - our own operations (the lease, the writability probe, metrics uploads, config and
#   manifest reads, corpus staging) go through `retry`, which wraps a whole operation.
# A request inside `retry` retries only until that operation's deadline (a context
# variable, which reaches gcsfs's event-loop thread with the request), so one operation
# gives up within its budget, plus at most one request's timeout.
RETRY_ENV = "XLNET_JAX_STORAGE_RETRY"
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# gcsfs logs each request that ran out of its retries with a traceback; the error reaches
# the caller (and `retry`), which reports it in one line.
logging.getLogger("gcsfs").setLevel(logging.CRITICAL)
_JITTER = random.Random()  # its own generator: seeded code elsewhere is not disturbed
# The time.monotonic() by which the `retry` in progress (if any) must give up.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "xlnet_jax_storage_deadline", default=None
)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded in attempts and in time.

    Attributes:
      attempts: tries of one operation, the first included.
      first_delay_s, max_delay_s: the delay before retry n is first_delay_s * 2**(n-1),
        at most max_delay_s, of which a random half is jitter.
      budget_s: seconds one operation may spend retrying before it gives up.
      request_timeout_s: the longest one gcsfs API request (not a whole-file download)
        may take before it is cut and retried: a stalled request ends within it.

    The checkpoint's own bounds (save_wait_s, failed_saves, metrics_wait_s) are config
    fields; this policy is storage's, for every command, config or not.
    """

    attempts: int = 12
    first_delay_s: float = 1.0
    max_delay_s: float = 32.0
    budget_s: float = 300.0
    request_timeout_s: float = 120.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try number `attempt` (1-based)."""
        ceiling = min(self.max_delay_s, self.first_delay_s * 2 ** (attempt - 1))
        return ceiling / 2 + _JITTER.uniform(0, ceiling / 2)


def retry_policy() -> RetryPolicy:
    """The policy, with overrides from $XLNET_JAX_STORAGE_RETRY ("budget_s=20,attempts=5")."""
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return RetryPolicy()
    fields = {f.name: f.type for f in dataclasses.fields(RetryPolicy)}
    overrides = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        name = name.strip()
        if name not in fields:
            raise ConfigError(
                f"${RETRY_ENV}: unknown field {name!r}; known: {', '.join(fields)} (a "
                "checkpoint's bounds, save_wait_s, failed_saves and metrics_wait_s, are "
                "config fields: --config.FIELD=VALUE)."
            )
        try:
            overrides[name] = (int if fields[name] in (int, "int") else float)(value)
        except ValueError:
            raise ConfigError(f"${RETRY_ENV}: {name}={value!r} is not a number.") from None
    return RetryPolicy(**overrides)


def is_transient(error: BaseException) -> bool:
    """Whether `error` is worth retrying: 408/429/5xx, a reset, a timeout.

    403 (an OSError "Forbidden"), 404 (FileNotFoundError) and 412 (FileExistsError, a
    failed precondition) are answers, not accidents: never retried.
    """
    import aiohttp  # storage's libraries: an error of theirs means they are loaded already
    import fsspec
    import requests
    from gcsfs.retry import ChecksumError, HttpError

    if isinstance(error, HttpError):
        return error.code in TRANSIENT_STATUS
    if isinstance(error, aiohttp.ClientResponseError):
        return error.status in TRANSIENT_STATUS
    if isinstance(error, requests.HTTPError) and error.response is not None:
        return error.response.status_code in TRANSIENT_STATUS
    return isinstance(
        error,
        (
            ChecksumError,  # a download that arrived damaged
            aiohttp.ClientError,
            requests.RequestException,
            ConnectionError,
            TimeoutError,
            asyncio.TimeoutError,
            fsspec.exceptions.FSTimeoutError,
        ),
    )


def retry(
    operation: Callable[[], T],
    what: str,
    *,
    policy: RetryPolicy | None = None,
    deadline: float | None = None,
) -> T:
    """`operation()`, retried on transient errors under the policy (or until `deadline`,
    a time.monotonic() value); then a StorageError naming `what`. Other errors pass through.
    """
    policy = policy or retry_policy()
    start = time.monotonic()
    end = start + policy.budget_s if deadline is None else deadline
    attempt = 0
    while True:
        attempt += 1
        token = _DEADLINE.set(end)
        try:
            return operation()
        except Exception as e:
            if not is_transient(e):
                raise
            delay = policy.delay(attempt)
            if attempt >= policy.attempts or time.monotonic() + delay > end:
                raise StorageError(
                    f"Object storage failed {attempt} time(s) in {time.monotonic() - start:.0f} s "
                    f"while {what} (last: {one_line(e)}); a transient fault that outlasted the "
                    f"retry budget, not a problem with the path. Rerun when storage answers."
                ) from None
            log.warning(
                "Storage error while %s (%s); retry %d in %.1f s.",
                what,
                one_line(e),
                attempt,
                delay,
            )
            time.sleep(delay)
        finally:
            _DEADLINE.reset(token)


def _under_policy(request: Callable, bounded: bool) -> Callable:
    """`request` (a gcsfs request method without gcsfs's retries) retried under the policy
    (read when it is sent), on what either of us deems transient (gcsfs also knows its
    expired-credential answers); 403, 404, 412 are raised at once. With `bounded` (an API
    request, not a download) a request that stalls is cut after request_timeout_s and
    retried."""

    from gcsfs import retry as gcsfs_retry

    @functools.wraps(request)
    async def retried(*args, **kwargs):
        policy, start = retry_policy(), time.monotonic()
        end = min(start + policy.budget_s, _DEADLINE.get() or math.inf)
        timeout = policy.request_timeout_s if bounded else None
        for attempt in itertools.count(1):
            try:
                return await asyncio.wait_for(request(*args, **kwargs), timeout)
            except Exception as e:
                delay = policy.delay(attempt)
                if (
                    not (is_transient(e) or gcsfs_retry.is_retriable(e))
                    or attempt >= policy.attempts
                    or time.monotonic() + delay > end
                ):
                    raise
                await asyncio.sleep(delay)

    return retried
