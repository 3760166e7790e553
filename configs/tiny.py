"""Tiny XLNet: the CPU demo. Trains in a few minutes on the built-in corpus.

xlnet-jax prepare --out demo/corpus --vocab_size 2000
xlnet-jax train --config configs/tiny.py --workdir demo/run --config.corpus_dir demo/corpus

From scratch, XLNet's PLM loss sits at the unigram entropy until roughly 100k targets have
been predicted (xlnet-jax and HF's XLNetLMHeadModel alike, fed the same masks), so the demo
predicts a third of each row (mask_alpha=2; the paper predicts a sixth) with a small
vocabulary and model: 0.15-0.45 s a step on 2 cores (idle to loaded), held-out loss 4.40 nats
after 2000 steps, 1.3 under the validation tokens' unigram entropy (docs/getting-started.md,
"Demo result").
"""

from xlnet_jax.config import cpu_demo_setting, default_config


def get_config():
    c = cpu_demo_setting(default_config())
    c.vocab_size = 2000
    c.batch_size = 16
    c.num_train_steps = 2000
    c.warmup_steps = c.get_ref("num_train_steps") // 20
    c.log_every = 50
    # A quarter of the run (500 of 2000): a shortened --config.num_train_steps=400 still
    # prints held-out losses (every 100 steps) unless --config.eval_every is set too.
    c.eval_every = (c.get_ref("num_train_steps") + 3) // 4  # never 0
    c.eval_steps = 8
    c.checkpoint_every = (c.get_ref("num_train_steps") + 3) // 4  # never 0
    return c
