"""What `xlnet-jax launch ... --dry-run` prints, read back as bash reads it.

bash runs the printed text in an empty folder with its programs (`gcloud`, `git`, or the
local backend's python) replaced by shell functions that only print the words they were
given; nothing else may happen there (the folder stays empty). So a test sees the argv a
user pasting the lines would run.
"""

import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

END = "\x01"  # marks the end of one command's words (no printed value holds it)


def read_back(printed: str, programs: Sequence[str] = ("gcloud", "git")) -> list[list[str]]:
    """The argv of each command in `printed`, all of which run one of `programs`."""
    stand_ins = "".join(f"{p}() {{ printf '%s\\0' {p} \"$@\" {END}; }}\n" for p in programs)
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            ["bash", "-c", stand_ins + printed], cwd=folder, capture_output=True, timeout=30
        )
        assert done.returncode == 0 and not done.stderr, done.stderr
        assert not list(Path(folder).iterdir()), "the printed text did more than run commands"
    commands, words = [], []
    for word in done.stdout.decode().split("\0")[:-1]:
        if word == END:
            commands.append(words)
            words = []
        else:
            words.append(word)
    assert not words, "a command's words without its end mark"
    return commands
