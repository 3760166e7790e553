"""The config file the training tests pass to `xlnet-jax train`: a seconds-per-run model.

xlnet-jax train --config tests/train_config.py --workdir W --config.corpus_dir=CORPUS

It imports no jax: a multi-process job's supervising parent parses it too, and only the
trainer it starts needs jax.
"""

from xlnet_jax.config import default_config


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


def get_config():
    return small_config(
        vocab_size=500,
        num_train_steps=12,
        warmup_steps=3,
        log_every=1,
        checkpoint_every=6,
        eval_every=0,
        keep_checkpoints=5,
    )
