"""Checks made before training starts: the corpus matches the config, the workdir is usable."""

import fcntl
import os
import pathlib
import shutil

import jax
import ml_collections

from xlnet_jax.data.prepare import load_manifest, manifest_fingerprint
from xlnet_jax.validate import ConfigError

MIN_FREE_BYTES = 64 * 2**20


class WorkdirError(RuntimeError):
    """The workdir cannot be used; the message names it and what to do."""


class WorkdirLock:
    """An exclusive lock per process on the workdir, released on exit or crash."""

    def __init__(self, path: pathlib.Path):
        self._file = open(path, "a+")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise WorkdirError(
                f"Another run is training in this workdir (lock {path} is held). Wait for it "
                "to finish or stop it, or use a different --workdir."
            ) from None

    def release(self) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()


def prepare_workdir(workdir: str) -> WorkdirLock:
    """Creates the workdir, checks it is writable with room to spare, and locks it."""
    root = pathlib.Path(workdir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise WorkdirError(
            f"Workdir {root} is not writable ({e.strerror}); pick another."
        ) from None
    free = shutil.disk_usage(root).free
    if free < MIN_FREE_BYTES:
        raise WorkdirError(
            f"Workdir {root} has only {free / 2**20:.0f} MiB free; checkpoints need more. "
            "Free some space or pick another --workdir."
        )
    return WorkdirLock(root / f".lock-process-{jax.process_index()}")


def load_corpus_manifest(config: ml_collections.ConfigDict):
    """The prepared corpus's manifest and fingerprint, checked against config.vocab_size."""
    if not config.corpus_dir:
        raise ConfigError(
            "config.corpus_dir: is empty; run `xlnet-jax prepare --out DIR` and pass "
            "--config.corpus_dir=DIR."
        )
    manifest = load_manifest(config.corpus_dir)
    if manifest.vocab_size != config.vocab_size:
        raise ConfigError(
            f"config.vocab_size: must equal the tokenizer's vocabulary, {manifest.vocab_size} "
            f"in {config.corpus_dir} (got {config.vocab_size})."
        )
    return manifest, manifest_fingerprint(manifest)
