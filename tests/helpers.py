"""Small shared builders for the training tests: configs and synthetic batches."""

import numpy as np

from xlnet_jax.config import default_config

SEP, CLS = 4, 3


def small_config(**overrides):
    """A 2-layer, 32-wide model on 32-token rows: compiles and steps in seconds on CPU."""
    c = default_config()
    c.vocab_size = 100
    c.d_model = 32
    c.n_layer = 2
    c.n_head = 4
    c.d_head = 8
    c.d_inner = 64
    c.seq_len = 32
    c.reuse_len = 16
    c.mem_len = 24
    c.perm_size = 16
    c.num_predict = 6
    c.batch_size = 8
    c.num_train_steps = 20
    c.warmup_steps = 2
    c.learning_rate = 3e-3
    c.dropout = 0.1
    c.dropatt = 0.1
    for name, value in overrides.items():
        c[name] = value
    return c


def synthetic_batch(config, step: int) -> dict:
    """A random batch with the stream layout's functional tokens (<sep> ... <sep> <cls>)."""
    rng = np.random.default_rng(step)
    rows, length = config.batch_size, config.seq_len
    ids = rng.integers(9, config.vocab_size, (rows, length)).astype(np.int32)
    ids[:, [length - 3, length - 1]] = SEP
    ids[:, length - 1] = CLS
    seg = np.zeros((rows, length), np.int32)
    seg[:, (length + config.reuse_len) // 2 :] = 1
    seg[:, -1] = 2
    return {
        "input_ids": ids,
        "seg_ids": seg,
        "is_word_start": rng.random((rows, length)) < 0.7,
        "is_functional": np.isin(ids, [SEP, CLS]),
        "is_backward": np.arange(rows) % 2 == 1 if config.bi_data else np.zeros(rows, bool),
    }
