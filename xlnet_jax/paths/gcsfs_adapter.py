"""Every use of gcsfs's private names: its request methods, which we retry and fence.

gcsfs has no public hook for the retries of a request (its `retries` is a class constant,
6, fixed when the class is defined) nor for a bound on it: `GCSFileSystem._request` (every
API call), `_get_file_request` and `_get_file_concurrent` (downloads) carry its fixed retry
schedule (`gcsfs.retry.retry_request`), and `__wrapped__` is the method without it.
`replace_requests` swaps the three for ours (paths: the one storage retry policy);
`wrap_request` wraps `_request` once more (run/fence.py: no write outlives the lease).
Each checks first, once, that the names still have the shape this module was written for
(paths/library.py).
"""

from collections.abc import Callable

import gcsfs.core

from xlnet_jax.paths.library import changed, expect

LIBRARY = "gcsfs"
# The methods replaced, with the parameters each must take first (we call them by those).
REQUESTS = {
    "_request": ("self", "method", "path"),
    "_get_file_request": ("self", "rpath", "lpath"),
    "_get_file_concurrent": ("self", "rpath", "lpath"),
}
_replaced = False
_wrappers: set[str] = set()


def check() -> None:
    """Raises the one-line error unless each request method exists, takes the parameters
    we pass, and carries gcsfs's retry decorator (`__wrapped__`)."""
    for name, parameters in REQUESTS.items():
        method = expect(gcsfs.core.GCSFileSystem, name, parameters, LIBRARY)
        if not _replaced and not callable(getattr(method, "__wrapped__", None)):
            raise changed(LIBRARY, f"GCSFileSystem.{name} has no __wrapped__ (its retries)")


def replace_requests(make: Callable[[Callable, bool], Callable]) -> None:
    """Replaces each request method, once, by `make(method_without_retries, bounded)`;
    `bounded` is True for `_request` (an API call, not a whole-file download)."""
    global _replaced
    if _replaced:
        return
    check()
    for name in REQUESTS:
        method = getattr(gcsfs.core.GCSFileSystem, name)
        setattr(gcsfs.core.GCSFileSystem, name, make(method.__wrapped__, name == "_request"))
    _replaced = True


def wrap_request(key: str, make: Callable[[Callable], Callable]) -> None:
    """Wraps `GCSFileSystem._request` by `make(current_request)`, once per `key`."""
    if key in _wrappers:
        return
    expect(gcsfs.core.GCSFileSystem, "_request", REQUESTS["_request"], LIBRARY)
    gcsfs.core.GCSFileSystem._request = make(gcsfs.core.GCSFileSystem._request)
    _wrappers.add(key)
