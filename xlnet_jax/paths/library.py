"""What the adapters of other libraries' private names share: the check before first use.

gcsfs, orbax and tensorstore each have one adapter module (paths/gcsfs_adapter.py,
checkpoint/orbax_adapter.py, checkpoint/tensorstore_adapter.py) that holds every use of
their non-public names. Before it patches or reads one, the adapter asks `expect` whether
the name still has the shape it was written for; a release that changed it stops the
command in one line naming the library and its version, not in a wrong behaviour later.
"""

import importlib.metadata
import inspect
from typing import Any

from xlnet_jax.errors import MissingDependencyError


def changed(library: str, what: str) -> MissingDependencyError:
    """The one-line error for a library whose private part no longer has its shape."""
    try:
        version = importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    return MissingDependencyError(
        f"{library} {version}: {what}; xlnet-jax relies on it (its adapter for {library}) "
        f"and runs on the {library} version setup.py pins: install that one."
    )


def expect(owner: Any, name: str, parameters: tuple[str, ...], library: str) -> Any:
    """`owner.name`, a callable whose first parameters are `parameters`, or the one-line
    error saying what changed."""
    where = f"{getattr(owner, '__name__', owner)}.{name}"
    target = getattr(owner, name, None)
    if not callable(target):
        raise changed(library, f"{where} is gone")
    try:
        found = tuple(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        found = ()
    if found[: len(parameters)] != parameters:
        raise changed(library, f"{where} takes {found}, not {parameters} first")
    return target


def expect_value(owner: Any, name: str, kind: type, library: str) -> Any:
    """`owner.name`, an instance of `kind`, or the one-line error saying what changed."""
    value = getattr(owner, name, None)
    if not isinstance(value, kind):
        where = f"{getattr(owner, '__name__', owner)}.{name}"
        raise changed(library, f"{where} is {type(value).__name__}, not a {kind.__name__}")
    return value
