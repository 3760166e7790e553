"""XLNet-Base: 12 layers, 768 wide, 12 heads, GELU, in the published setting otherwise.

The paper gives no separate base pretraining recipe; this keeps the large setting's
sequence layout, objective and optimisation (batch 8192) with BERT-base's width.

  xlnet-jax compile --config configs/base.py --topology v3:16x32
  xlnet-jax train --config configs/base.py --workdir gs://BUCKET/base --distributed \\
      --config.corpus_dir gs://BUCKET/corpus
"""

from xlnet_jax.config import default_config, published_setting


def get_config():
    c = published_setting(default_config())
    c.d_model = 768
    c.n_layer = 12
    c.n_head = 12
    c.d_head = 64
    c.d_inner = 3072
    return c
