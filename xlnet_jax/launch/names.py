"""Validators for the names and values the launcher passes to gcloud and to workers.

Each is an argparse `type=`: a bad value fails at parse time with argparse's
"argument --flag: ..." message, so the error always names the flag. Values that pass are
still shell-quoted wherever they are used; validation catches mistakes, quoting stops
injection.
"""

import argparse
import re
from collections.abc import Sequence

from xlnet_jax.errors import ConfigError
from xlnet_jax.hardware import slices

_TPU_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
_ACCELERATOR = re.compile(r"v[0-9]+[a-z]*-[0-9]+")
_RUNTIME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_PROJECT = re.compile(r"([a-z][-a-z0-9.]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]")
_LABEL = r"[a-z][-_a-z0-9]{0,62}=[-_a-z0-9]{0,63}"
_LABELS = re.compile(rf"{_LABEL}(,{_LABEL})*")
_EMAIL = re.compile(r"[a-z0-9][-a-z0-9._]*@[a-z0-9][-a-z0-9.]*")
_RESOURCE = re.compile(r"[a-z0-9][-a-z0-9/._]*")
_SCOPES = re.compile(r"[-a-z0-9_.:/]+(,[-a-z0-9_.:/]+)*")
_PYTHON = re.compile(r"python3\.[0-9]+")
_OVERRIDE = re.compile(r"--config\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*=.*", re.DOTALL)


def _matching(pattern: re.Pattern[str], what: str, value: str) -> str:
    if not pattern.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid {what}")
    return value


def tpu_name(value: str) -> str:
    """A TPU VM / queued resource name: GCE resource naming rules."""
    return _matching(
        _TPU_NAME,
        "TPU name (lowercase letters, digits and hyphens, starting with a letter, not ending "
        "with a hyphen, at most 63 characters)",
        value,
    )


def zone(value: str) -> str:
    """A GCE zone such as us-central1-a or europe-west4-a."""
    return _matching(_ZONE, "zone (like us-central1-a)", value)


def accelerator_type(value: str) -> str:
    """A TPU slice as `compile --topology` takes it, a Cloud accelerator type (v4-64,
    v5litepod-16) or a libtpu topology (v4:2x4x4); gcloud gets the Cloud type. A Cloud-shaped
    name of a generation the table does not know yet passes to gcloud as it is (with
    --runtime-version)."""
    try:
        tpu = slices.parse_slice(value)
    except ConfigError as e:
        if _ACCELERATOR.fullmatch(value) and not slices.known_generation(value):
            return value
        raise argparse.ArgumentTypeError(str(e)) from None
    return value if _ACCELERATOR.fullmatch(value) else tpu.accelerator_type


def runtime_version(value: str) -> str:
    """A TPU software version such as tpu-ubuntu2204-base or v2-alpha-tpuv6e."""
    return _matching(_RUNTIME, "TPU runtime version (like tpu-ubuntu2204-base)", value)


def labels(value: str) -> str:
    """GCE labels: KEY=VALUE[,KEY=VALUE...] in lowercase letters, digits, - and _."""
    return _matching(_LABELS, "labels (like team=nlp,run=base)", value)


def service_account(value: str) -> str:
    """A service account email: the workers' identity (it needs write access to the bucket)."""
    return _matching(_EMAIL, "service account email", value)


def resource(value: str) -> str:
    """A network or subnetwork name (or its projects/.../ path)."""
    return _matching(_RESOURCE, "network name", value)


def scopes(value: str) -> str:
    """OAuth scopes or their aliases, comma separated (e.g. cloud-platform)."""
    return _matching(_SCOPES, "scopes (like cloud-platform)", value)


def project(value: str) -> str:
    """A GCP project id, optionally domain-scoped (example.com:my-project)."""
    return _matching(_PROJECT, "GCP project id", value)


def python(value: str) -> str:
    """The interpreter to build the workers' venv with: python3.N (also its apt package)."""
    return _matching(_PYTHON, "Python executable (like python3.11)", value)


def worker(value: str) -> str:
    """A worker index (0, 1, ...) or "all"."""
    if value != "all" and not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a worker index or 'all'")
    return value


def positive_int(value: str) -> int:
    """An integer >= 1 (process counts, device counts, line counts)."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return int(value)


def non_negative_int(value: str) -> int:
    """An integer >= 0 (seconds to wait)."""
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer >= 0")
    return int(value)


def port(value: str) -> int:
    """A TCP port, or 0 to pick a free one."""
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (0 picks a free one)")
    return int(value)


def not_an_option(value: str) -> str:
    """A non-empty value that cannot be mistaken for an option (git URL, git ref)."""
    if not value or value.startswith("-"):
        raise argparse.ArgumentTypeError(f"{value!r} must be non-empty and not start with '-'")
    return value


def local_path(value: str) -> str:
    """A local path that gcloud scp reads neither as INSTANCE:PATH nor as a flag."""
    if not value or ":" in value or value.startswith("-"):
        raise argparse.ArgumentTypeError(
            f"{value!r} must be a local path without ':' and not starting with '-'"
        )
    return value


def config_override(value: str) -> str:
    """A config override in the train command's form: --config.FIELD[.SUB]=VALUE."""
    if not _OVERRIDE.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a config override; write --config.FIELD=VALUE"
        )
    return value


def dashed(argv: Sequence[str], keep: Sequence[str]) -> list[str]:
    """`argv` with each flag's underscores as dashes (`--num_cpu_devices=2` ->
    `--num-cpu-devices=2`), so `launch` takes the spellings of the other commands too;
    config overrides (`--config.FIELD=...`), values and the flags in `keep` (passed on to
    `train` as they are) stay."""
    spelled = []
    for arg in argv:
        flag, equals, value = arg.partition("=")
        if flag.startswith("--") and not flag.startswith("--config.") and flag not in keep:
            arg = flag.replace("_", "-") + equals + value
        spelled.append(arg)
    return spelled
