"""The built-in corpus: the standard library's docstrings, deterministic and non-trivial."""

import os
import sysconfig
import textwrap

from xlnet_jax.data import builtin_corpus, sources


def test_deterministic_sorted_and_free_of_tests():
    stdlib = sysconfig.get_paths()["stdlib"]
    files = builtin_corpus.stdlib_files()
    assert files == builtin_corpus.stdlib_files()
    assert not [f for f in files if f"{os.sep}test{os.sep}" in f or "site-packages" in f]
    sub = os.path.join(stdlib, "email")
    assert list(builtin_corpus.builtin_documents(sub)) == list(
        builtin_corpus.builtin_documents(sub)
    )


def test_module_docstrings_become_sentences_in_source_order():
    source = textwrap.dedent('''\
    """Module doc. Second sentence!

    >>> doctest_line()

    Next paragraph, e.g. this one."""

    class C:
        """Class doc."""

        def f(self):
            """Method doc?"""
    ''').encode()
    assert builtin_corpus.module_sentences(source) == [
        "Module doc.",
        "Second sentence!",
        "Next paragraph, e.g. this one.",
        "Class doc.",
        "Method doc?",
    ]
    assert builtin_corpus.module_sentences(b"def broken(:\n") == []


def test_no_inputs_means_the_builtin_corpus_a_few_mb_of_english():
    (builtin,) = sources.resolve_inputs([])
    docs = list(builtin.documents())
    text = " ".join(s for doc in docs for s in doc)
    assert builtin.record["path"] == builtin_corpus.builtin_name()
    assert len(docs) > 500 and builtin.record["bytes"] > 1_000_000
    assert sum(c.isascii() for c in text) / len(text) > 0.99
    assert text.count(" the ") > 10_000
