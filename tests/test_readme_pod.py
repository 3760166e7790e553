"""The README's "Train on a TPU pod" walk-through: each `xlnet-jax launch ... --dry-run`
block shows exactly what the launcher prints."""

import re
import shlex
from pathlib import Path

import pytest

from xlnet_jax.launch import pod

pytestmark = pytest.mark.usefixtures("committed_tree")
README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[tuple[list[str], str]]:
    """(launch argv, expected stdout) of each console block in the section."""
    section = README.read_text().split("## Train on a TPU pod\n", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for body in re.findall(r"```console\n(.*?)```", section, flags=re.DOTALL):
        command, _, output = body.partition("\n")
        assert command.startswith("$ xlnet-jax launch "), command
        blocks.append((shlex.split(command)[3:], output))
    return blocks


def test_every_launch_block_is_what_the_launcher_prints(capsys):
    blocks = _blocks()
    assert len(blocks) == 6
    for argv, output in blocks:
        assert argv[-1] == "--dry-run"
        assert pod.main(argv) == 0, argv
        assert capsys.readouterr().out == output, argv
