"""STS-B (regression) as the original's README fine-tunes XLNet-Large on GPUs.

xlnet-jax finetune --config configs/finetune/sts_b.py --task_name sts-b \
    --data_dir glue_data/STS-B --init_from PRETRAINED --workdir runs/sts-b

Source: zihangdai/xlnet README, "STS-B: sentence pair relevance regression (with GPUs)":
run_classifier --max_seq_length=128 --train_batch_size=8 on 4 GPUs (a global batch of
32) --learning_rate=5e-5 --train_steps=1200 --warmup_steps=120 --is_regression=True; the
other flags at run_classifier's defaults (weight decay 0, Adam epsilon 1e-8). The clip per
GPU tower (clip_replicas 4) is UNSURE: read from the flags, not from a run.
"""

from xlnet_jax.finetune.config import finetune_config


def get_config():
    c = finetune_config()
    c.seq_len = 128
    c.batch_size = 32
    c.num_train_steps = 1_200
    c.warmup_steps = c.get_ref("num_train_steps") // 10
    c.learning_rate = 5e-5
    c.weight_decay = 0.0
    c.adam_eps = 1e-8  # run_classifier's adam_epsilon default, which the README command keeps
    c.clip_replicas = 4  # UNSURE: 4 GPU towers (num_core_per_host 4), each clipping its own
    c.log_every = 50
    c.eval_every = (c.get_ref("num_train_steps") + 1) // 2  # never 0
    c.checkpoint_every = (c.get_ref("num_train_steps") + 1) // 2  # never 0
    return c
