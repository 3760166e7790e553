"""The built-in corpus: the docstrings of the running Python's standard library.

Always present, English, a few MB and free of licence questions, so `xlnet-jax prepare`
works out of the box. The stdlib source files are read with `ast` (nothing is imported),
in sorted path order; test packages and site-packages are skipped. Each module is one
document. Each docstring paragraph (blank-line separated, lines joined) is split into
sentences after '.', '!' or '?' followed by a capital letter (a heuristic: a paragraph as
one "sentence" would often outgrow the A/B window and leave nothing to cut at); doctest
paragraphs (starting with `>>>`) are dropped. Deterministic for a given Python version.
"""

import ast
import os
import re
import sys
import sysconfig
import warnings
from collections.abc import Iterator

_SKIP_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)

_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def builtin_name() -> str:
    """How the manifest names this input, e.g. 'builtin:python-3.11.7-stdlib-docstrings'."""
    v = sys.version_info
    return f"builtin:python-{v.major}.{v.minor}.{v.micro}-stdlib-docstrings"


def stdlib_files(root: str | None = None) -> list[str]:
    """The stdlib's .py files under root (default: this Python's), in sorted order."""
    root = root or sysconfig.get_paths()["stdlib"]
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS)
        files += [os.path.join(directory, n) for n in sorted(names) if n.endswith(".py")]
    return files


def module_sentences(source: bytes) -> list[str]:
    """The docstring sentences of one module's source, in source order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes etc. in old modules
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return []
    sentences = []
    for doc in _docstrings(tree):
        for paragraph in doc.split("\n\n"):
            text = " ".join(paragraph.split())
            if text and not text.startswith(">>>"):
                sentences += _SENTENCE_END.split(text)
    return sentences


def _docstrings(node: ast.AST) -> Iterator[str]:
    """Docstrings of node and its nested classes and functions, depth first in source order."""
    if isinstance(node, _DOC_NODES):
        doc = ast.get_docstring(node, clean=True)
        if doc:
            yield doc
    for child in ast.iter_child_nodes(node):
        yield from _docstrings(child)


def builtin_documents(root: str | None = None) -> Iterator[list[str]]:
    """One document (a list of sentences) per stdlib module that has docstrings."""
    for path in stdlib_files(root):
        with open(path, "rb") as f:
            sentences = module_sentences(f.read())
        if sentences:
            yield sentences
