"""Small: train on your own small folder of text, on CPU, on the first try.

xlnet-jax prepare --out mycorpus 'mytext/*.txt' --vocab_size 1000 --validation_fraction 0.2
xlnet-jax train --config configs/small.py --workdir runs/mine --config.corpus_dir=mycorpus

The tiny model (2 x 128) on 64-token rows, a batch of 8 and one validation batch: a step
reads 8 streams x 32 = 256 training tokens and an evaluation as many validation tokens, so
each split needs at least 256 (prepare prints both sizes). Warmup and evaluation follow
num_train_steps (a tenth, a half) unless set themselves, so `--config.num_train_steps=N`
alone gives a consistent schedule.
"""

from xlnet_jax.config import cpu_demo_setting, default_config


def get_config():
    c = cpu_demo_setting(default_config())
    c.vocab_size = 1000  # prepare with --vocab_size 1000
    c.batch_size = 8
    c.num_train_steps = 1000
    c.warmup_steps = c.get_ref("num_train_steps") // 10
    c.log_every = 10
    c.eval_every = c.get_ref("num_train_steps") // 2
    c.eval_steps = 1
    c.checkpoint_every = 100
    return c
