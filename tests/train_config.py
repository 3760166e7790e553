"""The config file the training tests pass to `xlnet-jax train`: a seconds-per-run model.

xlnet-jax train --config tests/train_config.py --workdir W --config.corpus_dir=CORPUS
"""

from tests.helpers import small_config


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
