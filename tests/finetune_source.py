"""What the fine-tuning command tests share: an `--init_from` directory of a small random
XLNet with a tokenizer of its own, and the commands' compilation cache."""

import contextlib
import os
import pathlib
from collections.abc import Iterator, Sequence
from unittest import mock

import jax
import numpy as np

from tests.xla_flags import COMPILATION_CACHE
from xlnet_jax.checkpoint import hf
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.tokenizer import train_tokenizer


def write_source(
    root: pathlib.Path, texts: Sequence[str], vocab_size: int, shape: dict, *, scale: float
) -> pathlib.Path:
    """An HF directory at `root`: a SentencePiece model of `vocab_size` pieces trained on
    `texts`, and an XLNet of `shape` with normal(0, scale) weights (zeros for scale 0)."""
    train_tokenizer(list(texts), str(root / "spiece.model"), vocab_size)
    config = ModelConfig(vocab_size=vocab_size, **shape)
    rng = np.random.default_rng(1)
    params = jax.tree.map(
        lambda s: rng.normal(0, scale, s.shape).astype(np.float32), hf.param_shapes(config)
    )
    hf.save_hf(root, config, params)
    return root


@contextlib.contextmanager
def run_compilation_cache() -> Iterator[None]:
    """The command's persistent compilation cache (it turns one on, as `train` does) in the
    test run's (tests/xla_flags.py), which this process's own compiles use too (conftest),
    and jax's cache settings put back afterwards: a command run here or started as a process
    loads what any earlier one compiled, as a user's resumed run would."""
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    saved = {name: getattr(jax.config, name) for name in names}
    with mock.patch.dict(os.environ, {"XLNET_JAX_COMPILATION_CACHE": COMPILATION_CACHE}):
        yield
    for name, value in saved.items():
        jax.config.update(name, value)
