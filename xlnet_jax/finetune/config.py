"""The fine-tuning config: pretraining's fields where the meaning is the same, at
fine-tuning values, and the part "finetune" of config/fields.py (num_segments,
max_qa_length, lr_layer_decay_rate, and SQuAD's fields at the original run_squad's
defaults).

The architecture (vocab_size, d_model, ...) is not set here: it comes from --init_from.
attention_impl is pretraining's ("auto": the attention kernel on a TPU or an NVIDIA GPU, its
padding masks as O(B·L) vectors, model/encoder.py; XLA on a CPU).
The values are the original's run_classifier defaults where it has them; the presets in
configs/finetune/ set each task's published values.
"""

import logging

import ml_collections

from xlnet_jax.config import default_config
from xlnet_jax.errors import ConfigError
from xlnet_jax.run.fields import field_problem, nonfinite_problem
from xlnet_jax.run.validate import validate_accumulation
from xlnet_jax.training.replicas import share_problem


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
    c.weight_decay = 0.0  # The original's run_classifier default.
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.log_every = 50
    c.eval_every = 0  # Steps between evaluations on the eval splits; 0: at the end only.
    c.checkpoint_every = 500
    c.keep_checkpoints = 1
    return c


log = logging.getLogger(__name__)


def xlnet_large_shape(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The released XLNet-Large's shape (xlnet_cased_L-24_H-1024_A-16), which the published
    fine-tuning settings are for: what `compile` sizes; --init_from replaces it when
    fine-tuning."""
    c.vocab_size = 32000
    c.d_model = 1024
    c.n_layer = 24
    c.n_head = 16
    c.d_head = 64
    c.d_inner = 4096
    return c


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming the first field out of its declared range, or the first
    relation between fine-tuning fields that does not hold."""
    if problem := field_problem(config) or nonfinite_problem(config):
        raise ConfigError(problem)
    if config.seq_len < 4:
        raise ConfigError(f"config.seq_len: must hold A <sep> <sep> <cls>, got {config.seq_len}")
    validate_accumulation(config)
    replicas = config.get("clip_replicas", 0) if config.clip_scope == "replica" else 0
    zero = "the mesh's data-parallel devices"
    if problem := share_problem(config, "clip_replicas", replicas, zero):
        raise ConfigError(problem)
    if config.num_segments == 1 and config.mem_len > 0:
        raise ConfigError(
            f"config.mem_len: {config.mem_len} with config.num_segments 1 does nothing (the "
            "memory carries one segment of a text to the next); set config.mem_len=0, or "
            "config.num_segments > 1 for texts longer than seq_len"
        )
    if config.num_segments > 1 and config.mem_len == 0:
        log.warning(
            "config.num_segments=%d with mem_len 0: the head sees the last segment alone "
            "(the no-memory control); mem_len = seq_len * (num_segments - 1) shows it all.",
            config.num_segments,
        )
