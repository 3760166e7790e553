"""Task heads on the encoder: the summary at <cls> and one projection to the task's outputs.

As the original's `summarize_sequence(summary_type="last", use_proj=True)` and HF's
`XLNetSequenceSummary` + `logits_proj`: the last position's hidden state (where XLNet puts
<cls>, inputs being padded on the left), a d_model projection, tanh, dropout, then a dense
layer to `num_outputs`. One head serves the three kinds of task:
  classification   num_outputs = number of labels (HF XLNetForSequenceClassification)
  regression       num_outputs = 1 (the same class with num_labels=1)
  multiple choice  num_outputs = 1 per (question, option) row; the caller reshapes the rows
                   [B * C] to [B, C] and takes a softmax over options (XLNetForMultipleChoice)
Parameter names follow HF's: transformer/..., sequence_summary/summary, logits_proj.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.encoder import XLNetEncoder


class SequenceSummary(nn.Module):
    """hidden [B, D] at <cls> -> tanh(dense(hidden)), then dropout: [B, D]."""

    config: ModelConfig

    @nn.compact
    def __call__(self, hidden: jax.Array, deterministic: bool) -> jax.Array:
        cfg = self.config
        init = nn.initializers.normal(cfg.initializer_range)
        summary = nn.Dense(cfg.d_model, kernel_init=init, name="summary")(hidden)
        return nn.Dropout(cfg.dropout)(jnp.tanh(summary), deterministic)


class SequenceHead(nn.Module):
    """XLNetEncoder, the summary at the last position and logits_proj.

    Attributes:
      config: the model config.
      num_outputs: logits per row (labels; 1 for regression and multiple choice).
    """

    config: ModelConfig
    num_outputs: int

    @nn.compact
    def __call__(
        self,
        input_ids: jax.Array,
        seg_ids: jax.Array,
        input_mask: jax.Array,
        mems: jax.Array,
        mem_mask: jax.Array,
        *,
        deterministic: bool,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Logits of one segment; arguments as XLNetEncoder.

        Returns:
          logits float32 [B, num_outputs], new_mems and new_mem_mask (as XLNetEncoder).
        """
        hidden, new_mems, new_mem_mask = XLNetEncoder(self.config, name="transformer")(
            input_ids, seg_ids, input_mask, mems, mem_mask, deterministic=deterministic
        )
        summary = SequenceSummary(self.config, name="sequence_summary")(
            hidden[:, -1], deterministic
        )
        init = nn.initializers.normal(self.config.initializer_range)
        logits = nn.Dense(self.num_outputs, kernel_init=init, name="logits_proj")(summary)
        return logits, new_mems, new_mem_mask
