"""XLNet-Base: 12 layers, 768 wide, 12 heads, GELU, at the published sequence layout.

The paper gives no base pretraining recipe of its own; this keeps the large setting's
sequence layout and objective and BERT-base's width, with batch 2048.

  xlnet-jax train --config configs/base.py --workdir gs://BUCKET/base --distributed \\
      --config.corpus_dir gs://BUCKET/corpus
  xlnet-jax compile --config configs/base.py --topology v4:4x4x4
"""

from xlnet_jax.config import default_config


def get_config():
    c = default_config()
    c.vocab_size = 32000
    c.d_model = 768
    c.n_layer = 12
    c.n_head = 12
    c.d_head = 64
    c.d_inner = 3072
    c.ff_activation = "gelu"
    c.seq_len = 512
    c.reuse_len = 256
    c.mem_len = 384
    c.perm_size = 256
    c.num_predict = 85
    c.bi_data = True
    c.batch_size = 2048
    c.num_train_steps = 500_000
    c.learning_rate = 4e-4
    c.warmup_steps = 40_000
    c.dtype = "bfloat16"
    c.remat = True
    c.log_every = 100
    c.eval_every = 10_000
    c.checkpoint_every = 2_000
    c.peak_tflops_per_device = 123.0  # TPU v3 chip, bf16
    return c
