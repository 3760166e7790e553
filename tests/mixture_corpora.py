"""Two small corpora of different real text with one tokenizer, for the mixture tests
(prepared once per session): the sharded English corpus (the stdlib's email and asyncio
docstrings) and the docstrings of json, http and unittest prepared with its spm.model
(`prepare --spm_model`), 8 shards a split each."""

import functools
import os
import sysconfig

from tests.sharded_corpus import SHARDS, sharded_corpus
from tests.test_data_common import scratch, write_documents
from xlnet_jax.data.builtin_corpus import builtin_documents
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.data.prepare import prepare_corpus


def other_text() -> str:
    """Real English of other subjects: the docstrings of the stdlib's json, http, unittest."""
    stdlib = sysconfig.get_paths()["stdlib"]
    subs = ("json", "http", "unittest")
    docs = [d for sub in subs for d in builtin_documents(os.path.join(stdlib, sub))]
    return write_documents(os.path.join(scratch("mixture-text"), "other.txt"), docs)


@functools.cache
def second_corpus(**options) -> str:
    """other_text() prepared with the sharded corpus's tokenizer; `options` (uncased,
    keep_accents, or spm_model=None for a tokenizer of its own) change the preparation."""
    out = os.path.join(scratch("mixture"), "docs")
    settings = dict(
        spm_model=load_manifest(sharded_corpus()).tokenizer_path,
        validation_fraction=0.2,
        num_workers=1,
        num_shards=SHARDS,
    )
    settings.update(options)
    if settings["spm_model"] is None:
        del settings["spm_model"]
        settings["vocab_size"] = 500
    prepare_corpus([other_text()], out, **settings)
    return out


def corpora() -> list[str]:
    """[English, docs]: the two corpora of the mixture tests, one tokenizer."""
    return [sharded_corpus(), second_corpus()]
