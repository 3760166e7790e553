"""Small: train on your own small folder of text, on CPU, on the first try.

xlnet-jax prepare --out mycorpus 'mytext/*.txt' --vocab_size 1000 --validation_fraction 0.2
xlnet-jax train --config configs/small.py --workdir runs/mine --config.corpus_dir=mycorpus

The tiny model (2 x 128) on 64-token rows and a batch of 8: a step reads 8 streams x 32 =
256 training tokens, and an evaluation 8 batches, 2,048 validation tokens (enough for a
standard error of the loss across batches), so the train split needs at least 256 tokens and
the validation split 2,048 (prepare prints both sizes; with fewer, `train` names the
--config.eval_steps that fits). Warmup and evaluation follow
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
    c.eval_every = (c.get_ref("num_train_steps") + 1) // 2  # never 0
    c.eval_steps = 8  # 8 x 8 streams x 32 = 2,048 validation tokens
    c.checkpoint_every = (c.get_ref("num_train_steps") + 9) // 10  # never 0
    return c
