"""Tiny XLNet: the CPU demo. Trains in a few minutes on the built-in corpus.

xlnet-jax prepare --out demo/corpus --vocab_size 8000
xlnet-jax train --config configs/tiny.py --workdir demo/run --config.corpus_dir demo/corpus
"""

from xlnet_jax.config import default_config


def get_config():
    c = default_config()
    c.vocab_size = 8000
    c.d_model = 256
    c.n_layer = 4
    c.n_head = 4
    c.d_head = 64
    c.d_inner = 1024
    c.seq_len = 128
    c.reuse_len = 64
    c.mem_len = 96
    c.perm_size = 64
    c.num_predict = 21
    c.batch_size = 16
    c.num_train_steps = 300
    c.learning_rate = 1e-3
    c.warmup_steps = 30
    c.dropout = 0.0
    c.dropatt = 0.0
    c.log_every = 20
    c.eval_every = 100
    c.eval_steps = 8
    c.checkpoint_every = 100
    return c
