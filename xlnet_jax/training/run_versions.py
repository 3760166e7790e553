"""The package versions a run trains with: recorded in WORKDIR/config.json, checked at start.

A pod host recreated after a preemption installs again; if it gets other versions than the
run was trained with (another jax, libtpu or orbax), its numerics or checkpoints may differ
from its peers' without a word. So the run's config records the versions of the project's
own requirements (those of `pip install xlnet-jax`, read from its installed metadata, so
setup.py stays their one list), of jax's accelerator plugins and of Python, and a start
whose versions differ is refused in one line unless `--allow_version_change`.
`xlnet-jax launch setup` installs the pinned versions of scripts/constraints/py3XY.txt.
"""

import importlib.metadata
import logging
import re
import sys

from xlnet_jax.errors import ConfigError

log = logging.getLogger(__name__)

DISTRIBUTION = "xlnet-jax"
# What jax runs on, installed by the tpu/gpu extras rather than required by the package.
PLUGINS = ("libtpu", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHOWN = 4  # changes named in the refusal; the rest are counted


def _requirements() -> list[str]:
    """The names of the project's requirements without an extra (setup.py install_requires)."""
    required = importlib.metadata.requires(DISTRIBUTION) or []
    return [_NAME.match(line)[0] for line in required if "extra ==" not in line]


def installed() -> dict[str, str]:
    """package -> version of what this process runs with ("python" is major.minor)."""
    try:
        names = _requirements()
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        names = []
    versions = {"python": "{}.{}".format(*sys.version_info[:2])}
    for name in [*names, *PLUGINS]:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a plugin of another platform
    return versions


def differences(recorded: dict[str, str], current: dict[str, str]) -> dict:
    """package -> (recorded, current) where they differ; None stands for "not installed"."""
    names = [*recorded, *(n for n in current if n not in recorded)]
    return {
        n: (recorded.get(n), current.get(n)) for n in names if recorded.get(n) != current.get(n)
    }


def describe(changed: dict) -> str:
    """ "jax 0.10.2 → 0.12.0.1, libtpu (none) → 0.0.50 and 3 more"."""
    shown = [f"{n} {old or '(none)'} → {new or '(none)'}" for n, (old, new) in changed.items()]
    more = len(shown) - _SHOWN
    return ", ".join(shown[:_SHOWN]) + (f" and {more} more" if more > 0 else "")


def check(recorded: dict[str, str] | None, source: str, *, allow_change: bool) -> None:
    """Refuses (ConfigError, one line) a start whose versions differ from the recorded ones.

    Args:
      recorded: the versions in the run's config.json; None for a run that saved none
        (written before versions were recorded): nothing to compare.
      source: the file they come from, named in the message.
      allow_change: log the change and go on (the run's record then takes the new versions).
    """
    if recorded is None:
        return
    changed = differences(recorded, installed())
    if not changed:
        return
    if allow_change:
        log.info(
            "Package versions changed since %s: %s (--allow_version_change).",
            source,
            describe(changed),
        )
        return
    raise ConfigError(
        f"this host's package versions differ from those the run trained with ({source}): "
        f"{describe(changed)}; install the run's versions (`xlnet-jax launch setup` pins "
        "scripts/constraints/py3XY.txt), or pass --allow_version_change to go on with these."
    )
