"""XLNet-Large, the published setting (Yang et al., 2019; docs/published.md).

24 layers, 1024 wide, 16 heads, d_inner 4096; seq 512, reuse 256, mem 384, perm 256,
num_predict 85, bi_data; batch 8192, lr 4e-4, 40k warmup, 500k steps, weight decay 0.01,
Adam eps 1e-6, dropout 0.1. The paper trained it on 512 TPU v3 chips for about 5.5 days.

  xlnet-jax compile --config configs/large.py --topology v3:16x32
  xlnet-jax train --config configs/large.py --workdir gs://BUCKET/large --distributed \\
      --config.corpus_dir gs://BUCKET/corpus
"""

from xlnet_jax.config import default_config, published_setting


def get_config():
    c = published_setting(default_config())
    c.d_model = 1024
    c.n_layer = 24
    c.n_head = 16
    c.d_head = 64
    c.d_inner = 4096
    return c
