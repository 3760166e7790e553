"""Tiny XLNet: the CPU demo. Trains in a few minutes on the built-in corpus.

xlnet-jax prepare --out demo/corpus --vocab_size 2000
xlnet-jax train --config configs/tiny.py --workdir demo/run --config.corpus_dir demo/corpus

From scratch, XLNet's PLM loss sits at the unigram entropy until roughly 100k targets have
been predicted (xlnet-jax and HF's XLNetLMHeadModel alike, fed the same masks), so the demo
predicts a third of each row (mask_alpha=2; the paper predicts a sixth) with a small
vocabulary and model: 0.1-0.2 s a step on 2 cores, held-out loss ~1.3 nats under the unigram
entropy after 2000 steps (README, "Demo result").
"""

from xlnet_jax.config import default_config


def get_config():
    c = default_config()
    c.vocab_size = 2000
    c.d_model = 128
    c.n_layer = 2
    c.n_head = 2
    c.d_head = 64
    c.d_inner = 512
    c.scan_unroll = 2
    c.seq_len = 64
    c.reuse_len = 32
    c.mem_len = 32
    c.perm_size = 32
    c.num_predict = 21
    c.mask_alpha = 2
    c.batch_size = 16
    c.num_train_steps = 2000
    c.learning_rate = 1e-3
    c.warmup_steps = 100
    c.dropout = 0.0
    c.dropatt = 0.0
    c.log_every = 50
    c.eval_every = 500
    c.eval_steps = 8
    c.checkpoint_every = 500
    return c
