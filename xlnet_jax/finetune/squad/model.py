"""The SQuAD network: XLNetEncoder, then the QA head, from the task's three input arrays.

p_mask and <cls>'s position follow from the window layout (windows.py), so the network
needs nothing the other tasks' networks do not: a position may hold an answer iff it is a
paragraph piece (segment 0, not <sep>, not padding) or <cls>. The gold starts the head
conditions on in training come as `start_positions`.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.config import ModelConfig
from xlnet_jax.data.tokenizer import CLS_ID, SEP_ID
from xlnet_jax.finetune.squad.windows import SEG_PARAGRAPH
from xlnet_jax.model.encoder import XLNetEncoder
from xlnet_jax.model.qa_head import QAHead


def answer_mask(input_ids: jax.Array, seg_ids: jax.Array, input_mask: jax.Array) -> jax.Array:
    """p_mask [B, L]: 1.0 where no answer may start or end (windows.py's rule)."""
    paragraph = (seg_ids == SEG_PARAGRAPH) & (input_ids != SEP_ID) & ~input_mask.astype(bool)
    return 1.0 - (paragraph | (input_ids == CLS_ID)).astype(jnp.float32)


class SquadModel(nn.Module):
    """XLNetEncoder ("transformer") and QAHead ("qa_head").

    Attributes:
      config: the model config.
      start_n_top, end_n_top: as QAHead.
    """

    config: ModelConfig
    start_n_top: int = 5
    end_n_top: int = 5

    @nn.compact
    def __call__(
        self,
        input_ids: jax.Array,
        seg_ids: jax.Array,
        input_mask: jax.Array,
        mems: jax.Array,
        mem_mask: jax.Array,
        start_positions: jax.Array | None = None,
        *,
        deterministic: bool,
    ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        """QAHead's outputs (training ones when start_positions is given), new_mems and
        new_mem_mask; the other arguments as XLNetEncoder."""
        hidden, new_mems, new_mem_mask = XLNetEncoder(self.config, name="transformer")(
            input_ids, seg_ids, input_mask, mems, mem_mask, deterministic=deterministic
        )
        cls_index = jnp.argmax(input_ids == CLS_ID, axis=-1)
        outputs = QAHead(self.config, self.start_n_top, self.end_n_top, name="qa_head")(
            hidden,
            answer_mask(input_ids, seg_ids, input_mask),
            cls_index,
            start_positions,
            deterministic=deterministic,
        )
        return outputs, new_mems, new_mem_mask
