"""SQuAD 2.0 with XLNet-Large, the published setting (a v3-8 in the original).

xlnet-jax finetune --config configs/finetune/squad_large.py --task_name squad \
    --data_dir squad --init_from xlnet_cased_L-24_H-1024_A-16 --workdir runs/squad

Sources: the XLNet paper's fine-tuning hyperparameters (appendix, the SQuAD column: dropout
0.1, attention dropout 0.1, sequence 512, batch 48, lr 3e-5, 8K steps, linear decay, weight
decay 0, Adam epsilon 1e-6, layer-wise lr decay 0.75) and zihangdai/xlnet's
scripts/tpu_squad_large.sh (the same, with 1000 warmup steps); the rest are run_squad's
flag defaults (max_query_length 64, doc_stride 128, max_answer_length 64, n_best_size 5,
start_n_top 5, end_n_top 5, clip 1.0, min_lr_ratio 0). Our choice, not the original's:
bfloat16 and rematerialisation, as configs/finetune/race.py, to fit a v3-8. The model's
fields are XLNet-Large's, for `xlnet-jax compile --config configs/finetune/squad_large.py
--task_name squad --topology v3-8`; fine-tuning takes them from --init_from.
"""

from xlnet_jax.finetune.config import finetune_config, xlnet_large_shape


def get_config():
    c = xlnet_large_shape(finetune_config())
    c.seq_len = 512
    c.batch_size = 48
    c.learning_rate = 3e-5
    c.num_train_steps = 8000
    c.warmup_steps = c.get_ref("num_train_steps") // 8
    c.lr_layer_decay_rate = 0.75
    c.dropout = 0.1
    c.dropatt = 0.1
    c.weight_decay = 0.0
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.clip_replicas = 8  # tpu_squad_large.sh: a v3-8, the clip per core under CrossShardOptimizer
    c.min_lr_ratio = 0.0
    c.dtype = "bfloat16"
    c.remat = True
    c.checkpoint_every = (c.get_ref("num_train_steps") + 7) // 8  # never 0
    return c
