"""Texts of up to 4 x 128 tokens read through the recurrence memory (classification,
regression, RACE passages).

xlnet-jax finetune --config configs/finetune/long_documents.py --task_name classification \
    --data_dir DATA --init_from PRETRAINED --workdir runs/long

Each text is cut into 4 consecutive segments of 128; the last ends in <cls>, and the head
reads it with a memory of the 384 positions before (mem_len = seq_len * (num_segments - 1):
every earlier position, in every layer). A shorter memory is cheaper but, with fewer layers
than segments, cannot carry the first segment to the last (the Fine-tune page's figures).
The gradient flows back through the memory into the earlier segments (mem_gradient, the
default), which so learn what to carry.
Our setting: the original fine-tunes one row, without memory.
"""

from xlnet_jax.finetune.config import finetune_config


def get_config():
    c = finetune_config()
    c.seq_len = 128
    c.num_segments = 4
    c.mem_len = 384
    c.batch_size = 32
    c.num_train_steps = 4_000
    c.warmup_steps = c.get_ref("num_train_steps") // 10
    c.learning_rate = 2e-5
    c.log_every = 100
    c.eval_every = (c.get_ref("num_train_steps") + 3) // 4  # never 0
    c.checkpoint_every = (c.get_ref("num_train_steps") + 3) // 4  # never 0
    return c
