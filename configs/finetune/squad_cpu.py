"""SQuAD-format fine-tuning of a small model on a CPU (the SQuAD page's real run).

xlnet-jax finetune --config configs/finetune/squad_cpu.py --task_name squad \
    --data_dir DATA --init_from demo/run --workdir demo/squad

Windows of 128 (the demo pretrained on 64), stride 64, questions cut to 24 pieces, answers
up to 16 pieces; batch 32, 600 steps, lr 1e-4 with 30 warmup steps (the classifier's CPU
preset's batch and lr).
Our choice for the CPU, not a published setting (configs/finetune/squad_base.py is).
"""

from xlnet_jax.finetune.config import finetune_config


def get_config():
    c = finetune_config()
    c.seq_len = 128
    c.doc_stride = 64
    c.max_query_length = 24
    c.max_answer_length = 16
    c.batch_size = 32
    c.clip_replicas = 8  # the SQuAD scripts' core count (squad_large.py), on any machine
    c.num_train_steps = 600
    c.warmup_steps = c.get_ref("num_train_steps") // 20
    c.learning_rate = 1e-4
    c.log_every = 25
    c.checkpoint_every = (c.get_ref("num_train_steps") + 5) // 6  # never 0
    return c
