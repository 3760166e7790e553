"""Runs a list of commands in order, or with `dry_run` only prints them.

A command prints as `shell.command(argv)` (a long one on backslash-continued lines): pasted
into a POSIX shell it runs exactly the argv that would have been executed. Execution passes
the argv list with no shell at all.
"""

import shlex
import subprocess
import sys
from collections.abc import Sequence

from xlnet_jax.launch import shell


def run_commands(commands: Sequence[Sequence[str]], dry_run: bool) -> int:
    """Prints or runs each command; stops at the first failure and returns its exit code."""
    for argv in commands:
        if dry_run:
            print(shell.command(argv))
            continue
        print(f"+ {shell.command(argv)}", file=sys.stderr, flush=True)
        try:
            code = subprocess.run(argv, check=False).returncode
        except FileNotFoundError:
            print(f"error: {argv[0]} not found on PATH (see --dry-run)", file=sys.stderr)
            return 127
        if code != 0:
            print(f"error: exit code {code} from: {shlex.join(argv)}", file=sys.stderr)
            return code if code > 0 else 128 - code  # -N: killed by signal N, as shells say.
    return 0
