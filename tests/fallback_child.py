"""Child process of the quiet-fallback test: damages each array file of a trained workdir's
newest checkpoint in turn, restores the way `xlnet-jax train` does, and prints one line
per case. The test reads everything the process writes, so a traceback that a failed read
leaves behind (at any time, up to interpreter exit) shows up there.

python -m tests.fallback_child WORKDIR CORPUS_DIR SCRATCH REPEATS
"""

import logging
import pathlib
import shutil
import sys

from tests import train_harness as harness
from xlnet_jax.checkpoint.checkpointer import Checkpointer

NEWEST, FALLBACK = 12, 10


def array_files(step_dir: pathlib.Path) -> list[str]:
    """Every array data file of a step (OCDBT `d/` files of state and mems), relative."""
    files = [p for item in ("state", "mems") for p in (step_dir / item).rglob("d/*")]
    return sorted(str(p.relative_to(step_dir)) for p in files if p.is_file())


def truncate(path: pathlib.Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def corrupt(path: pathlib.Path) -> None:
    """Bit rot: 8 bytes inverted a third of the way in."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))


DAMAGES = {"truncated": truncate, "corrupted": corrupt}


def cases(step_dir: pathlib.Path, repeats: int) -> list[tuple[str, str]]:
    """(damage, file): each array file truncated, then corrupted; then `repeats` truncations
    of the top-level state data file, whose loss fails every array read at once."""
    each = [(damage, name) for name in array_files(step_dir) for damage in DAMAGES]
    (top,) = [name for name in array_files(step_dir) if name.startswith("state/d/")]
    return each + [("truncated", top)] * repeats


def main(argv: list[str]) -> None:
    workdir, corpus_dir, scratch, repeats = argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s", force=True)
    config, fingerprint, abstract = harness.restore_setup(corpus_dir=corpus_dir)
    step_dir = pathlib.Path(workdir) / "checkpoints" / str(NEWEST)
    for index, (damage, name) in enumerate(cases(step_dir, int(repeats))):
        copy = harness.copy_run(workdir, pathlib.Path(scratch) / str(index))
        DAMAGES[damage](copy / "checkpoints" / str(NEWEST) / name)
        checkpointer = Checkpointer(str(copy), config)
        try:
            state = checkpointer.restore(abstract, config, fingerprint)
        finally:
            checkpointer.close()
        print(f"case {index}: {damage} {name}: restored step {int(state.step)}", flush=True)
        shutil.rmtree(copy)


if __name__ == "__main__":
    main(sys.argv[1:])
