"""GLUE (MNLI's setting, for every GLUE task unless a task has its own preset).

xlnet-jax finetune --config configs/finetune/glue.py --task_name mnli \
    --data_dir glue_data/MNLI --init_from PRETRAINED --workdir runs/mnli

Source: the paper's fine-tuning hyperparameter table for MNLI (Yang et al. 2019, appendix:
seq 128, batch 128, lr 2e-5, 10K steps, linear decay, weight decay 0.01, Adam epsilon 1e-6,
layer-wise decay 1.0, dropout 0.1). UNSURE: these values are recalled from the paper's
table, not checked against it here; warmup is not in that table (1000 steps, a tenth of
the run, is our choice); the paper gives no separate row for the smaller GLUE tasks
(CoLA, MRPC, RTE, WNLI ...), which usually need fewer steps: lower num_train_steps for them.
STS-B has its own preset (sts_b.py, from the original's README). The model's fields are
XLNet-Large's (for `compile`); fine-tuning takes them from --init_from.
"""

from xlnet_jax.finetune.config import finetune_config, xlnet_large_shape


def get_config():
    c = xlnet_large_shape(finetune_config())
    c.seq_len = 128
    c.batch_size = 128
    c.num_train_steps = 10_000
    c.warmup_steps = c.get_ref("num_train_steps") // 10
    c.learning_rate = 2e-5
    c.weight_decay = 0.01
    c.adam_eps = 1e-6
    c.lr_layer_decay_rate = 1.0
    c.clip_replicas = 8  # UNSURE: the paper's GLUE runs on a v3-8 (8 cores), not checked
    c.dtype = "float32"  # as the original's run_classifier (use_bfloat16 False)
    c.log_every = 100
    c.eval_every = (c.get_ref("num_train_steps") + 9) // 10  # never 0
    c.checkpoint_every = (c.get_ref("num_train_steps") + 9) // 10  # never 0
    return c
