"""How the launcher writes a command as shell text: a short one on one line, a long one on
backslash-continued lines, each option (a word starting with "--", with the words after it
up to the next option) on a line of its own. A shell reads the lines back as the same argv:
the breaks fall between words, outside any quotes, and every word is `shlex.quote`d.
"""

import shlex
from collections.abc import Sequence

WIDTH = 88  # the longest command printed on one line
INDENT = "    "  # of each continued line


def continued(argv: Sequence[str], indent: str = INDENT) -> str:
    """`argv` quoted, the words before its first option on the first line and each option
    on a continued line of its own."""
    groups: list[list[str]] = [[]]
    for word in argv:
        if word.startswith("--") and groups[-1]:
            groups.append([])
        groups[-1].append(shlex.quote(word))
    return f" \\\n{indent}".join(" ".join(group) for group in groups)


def command(argv: Sequence[str]) -> str:
    """`argv` as one line if it is short and holds no newline, else `continued`."""
    line = shlex.join(argv)
    return line if len(line) <= WIDTH and "\n" not in line else continued(argv)
