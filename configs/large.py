"""XLNet-Large, the published setting (Yang et al., 2019; XLNET_REFERENCE.md sections 3-4).

24 layers, 1024 wide, 16 heads, d_inner 4096; seq 512, reuse 256, mem 384, perm 256,
num_predict 85, bi_data; batch 8192, lr 4e-4, 40k warmup, 500k steps, weight decay 0.01,
Adam eps 1e-6, dropout 0.1. The paper trained it on 512 TPU v3 chips for about 5.5 days.

  xlnet-jax compile --config configs/large.py --topology v3:16x16
  xlnet-jax train --config configs/large.py --workdir gs://BUCKET/large --distributed \\
      --config.corpus_dir gs://BUCKET/corpus
"""

from xlnet_jax.config import default_config


def get_config():
    c = default_config()
    c.vocab_size = 32000
    c.d_model = 1024
    c.n_layer = 24
    c.n_head = 16
    c.d_head = 64
    c.d_inner = 4096
    c.ff_activation = "gelu"
    c.untie_r = True
    c.dropout = 0.1
    c.dropatt = 0.1
    c.seq_len = 512
    c.reuse_len = 256
    c.mem_len = 384
    c.perm_size = 256
    c.num_predict = 85
    c.mask_alpha = 6
    c.mask_beta = 1
    c.bi_data = True
    c.batch_size = 8192
    c.num_train_steps = 500_000
    c.learning_rate = 4e-4
    c.warmup_steps = 40_000
    c.min_lr_ratio = 0.001
    c.weight_decay = 0.01
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.dtype = "bfloat16"
    c.remat = True
    c.log_every = 100
    c.eval_every = 10_000
    c.checkpoint_every = 2_000
    c.peak_tflops_per_device = 123.0  # TPU v3 chip, bf16
    return c
