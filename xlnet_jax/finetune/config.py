"""The fine-tuning config: pretraining's fields where the meaning is the same, and the few of
its own, all declared here.

The architecture (vocab_size, d_model, ...) is not set here: it comes from --init_from. The
defaults are the original's run_classifier.py flags where it has them (lr 2e-5 ... see
configs/finetune/*.py for each task's published values).
"""

import ml_collections

from xlnet_jax.config import default_config
from xlnet_jax.errors import ConfigError

# The fields this config adds to pretraining's, with what each means.
FINETUNE_FIELDS = {
    "num_segments": "segments of seq_len one text is read in, through the recurrence memory "
    "(1: the original's single row; >1 reads texts up to num_segments * seq_len tokens)",
    "max_qa_length": "RACE: tokens kept from the end of question + option",
    "lr_layer_decay_rate": "layer l's learning rate is learning_rate * rate ** (n_layer - 1 - l)",
}


def finetune_config() -> ml_collections.ConfigDict:
    """Every field of a fine-tuning run with its default (a preset changes what differs)."""
    c = default_config()
    # Pretraining fields with the same meaning, at fine-tuning values.
    c.seq_len = 128  # Tokens per row: A <sep> B <sep> <cls>, padded on the left.
    c.mem_len = 0  # Memory carried between the segments of one text (num_segments > 1).
    c.reuse_len = 0  # All of a segment enters the memory.
    c.dropout = 0.1
    c.dropatt = 0.1
    c.batch_size = 32
    c.num_train_steps = 1000
    c.learning_rate = 2e-5
    c.warmup_steps = 100
    c.min_lr_ratio = 0.0  # The original decays fine-tuning to 0.
    c.weight_decay = 0.0  # The original's run_classifier.py default.
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.log_every = 50
    c.eval_every = 0  # Steps between evaluations on the eval splits; 0: at the end only.
    c.checkpoint_every = 500
    c.keep_checkpoints = 1
    c.attention_impl = "xla"  # The encoder's dense padding masks run the XLA path.
    # Fine-tuning's own fields.
    c.num_segments = 1
    c.max_qa_length = 128
    c.lr_layer_decay_rate = 1.0
    return c


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming the first fine-tuning field out of range."""
    positive = ("seq_len", "batch_size", "num_train_steps", "num_segments", "max_qa_length")
    for name in positive:
        if config[name] < 1:
            raise ConfigError(f"config.{name}: must be >= 1, got {config[name]}")
    if config.seq_len < 4:
        raise ConfigError(f"config.seq_len: must hold A <sep> <sep> <cls>, got {config.seq_len}")
    if not 0.0 < config.lr_layer_decay_rate <= 1.0:
        raise ConfigError(
            f"config.lr_layer_decay_rate: must be in (0, 1], got {config.lr_layer_decay_rate}"
        )
    if config.num_segments > 1 and config.mem_len < 1:
        raise ConfigError(
            f"config.num_segments={config.num_segments} reads a text through the memory: set "
            "config.mem_len >= 1 (seq_len * (num_segments - 1) lets the last segment see all)"
        )
    for name in ("mem_len", "warmup_steps", "eval_every", "checkpoint_every"):
        if config[name] < 0:
            raise ConfigError(f"config.{name}: must be >= 0, got {config[name]}")
    if config.checkpoint_every == 0:
        raise ConfigError("config.checkpoint_every: must be >= 1")
