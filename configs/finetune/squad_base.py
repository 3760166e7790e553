"""SQuAD 2.0 with XLNet-Base, as the original's base script runs it.

xlnet-jax finetune --config configs/finetune/squad_base.py --task_name squad \
    --data_dir squad --init_from xlnet_cased_L-12_H-768_A-12 --workdir runs/squad

Source: zihangdai/xlnet's scripts/gpu_squad_base.sh: sequence 512, batch 8, lr 2e-5, 12000
steps, 1000 warmup, Adam epsilon 1e-6; run_squad's defaults for the rest (layer-wise lr
decay 0.75, dropout 0.1, weight decay 0, the SQuAD fields as configs/finetune/squad_large.py).
Unsure: the script's comment reads "3 GPUs, each with 8 seqlen-512 samples", so the batch
it meant may be 24 in all rather than 8; the paper publishes only Large's setting (batch 48,
lr 3e-5, 8000 steps: configs/finetune/squad_large.py). The model's fields are the released
XLNet-Base's (xlnet_cased_L-12_H-768_A-12), for `compile`; fine-tuning takes them from
--init_from. float32 as the original; rematerialisation as squad_large.py.
"""

from xlnet_jax.finetune.config import finetune_config


def get_config():
    c = finetune_config()
    c.seq_len = 512
    c.batch_size = 8  # unsure: see above
    c.learning_rate = 2e-5
    c.num_train_steps = 12000
    c.warmup_steps = c.get_ref("num_train_steps") // 12
    c.lr_layer_decay_rate = 0.75
    c.dropout = 0.1
    c.dropatt = 0.1
    c.weight_decay = 0.0
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.clip_replicas = 1  # gpu_squad_base.sh: one GPU, no CrossShardOptimizer: one clip
    c.min_lr_ratio = 0.0
    c.dtype = "float32"  # the original's (use_bfloat16 False); Base fits a GPU in it
    c.remat = True
    c.checkpoint_every = (c.get_ref("num_train_steps") + 11) // 12  # never 0
    # XLNet-Base's shape
    c.vocab_size, c.d_model, c.n_layer, c.n_head, c.d_head, c.d_inner = 32000, 768, 12, 12, 64, 3072
    return c
