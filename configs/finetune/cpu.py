"""Fine-tuning a small model on a CPU (the demo's `tiny`, the Fine-tune page's real run).

xlnet-jax finetune --config configs/finetune/cpu.py --task_name classification \
    --data_dir DATA --init_from demo/run --workdir demo/finetune

Short rows (seq_len 64), batch 32, lr 1e-4 (a small model from scratch-like weights needs more
than the published 2e-5), 300 steps with 30 of warmup: a few minutes on 2 cores. Our choice
for the CPU, not a published setting.
"""

from xlnet_jax.finetune.config import finetune_config


def get_config():
    c = finetune_config()
    c.seq_len = 64
    c.batch_size = 32
    c.num_train_steps = 300
    c.warmup_steps = c.get_ref("num_train_steps") // 10
    c.learning_rate = 1e-4
    c.log_every = 25
    c.checkpoint_every = (c.get_ref("num_train_steps") + 2) // 3  # never 0
    return c
