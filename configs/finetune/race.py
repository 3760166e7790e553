"""RACE as the XLNet authors fine-tuned XLNet-Large on it.

xlnet-jax finetune --config configs/finetune/race.py --task_name race \
    --data_dir RACE --init_from PRETRAINED --workdir runs/race

Source: zihangdai/xlnet scripts/tpu_race_large_bsz32.sh (max_seq_length 512, max_qa_length
128, train_batch_size 32, train_steps 12000, warmup_steps 1000, learning_rate 2e-5,
weight_decay 0, adam_epsilon 1e-6; lr_layer_decay_rate left at run_race's default 1.0),
which agree with the paper's fine-tuning table for RACE (Yang et al. 2019, appendix: batch
32, lr 2e-5, 12K steps, layer-wise decay 1.0; the table lists weight decay 0.01 where the
script passes 0: we follow the script). Dropout 0.1 and dropatt 0.1 as run_race's flags.
The model's fields are XLNet-Large's, for `xlnet-jax compile --config
configs/finetune/race.py --task_name race --topology v3-8`; fine-tuning takes them from
--init_from.
"""

from xlnet_jax.finetune.config import finetune_config, xlnet_large_shape


def get_config():
    c = xlnet_large_shape(finetune_config())
    c.seq_len = 512
    c.max_qa_length = 128
    c.batch_size = 32
    c.clip_replicas = 32  # tpu_race_large_bsz32.sh: 32 cores, each row its own clip
    c.num_train_steps = 12_000
    c.warmup_steps = c.get_ref("num_train_steps") // 12
    c.learning_rate = 2e-5
    c.weight_decay = 0.0
    c.adam_eps = 1e-6
    c.lr_layer_decay_rate = 1.0
    c.dtype = "bfloat16"
    c.remat = True
    c.log_every = 100
    c.eval_every = (c.get_ref("num_train_steps") + 5) // 6  # never 0
    c.checkpoint_every = (c.get_ref("num_train_steps") + 11) // 12  # never 0
    return c
