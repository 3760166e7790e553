"""The SQuAD network: XLNetEncoder, then the QA head.

The network gets what every task's network gets (input_ids, seg_ids, input_mask) and the
gold starts (the task's network_inputs), on which the head conditions its training outputs.
It reads the rest from the window layout (windows.py): a position may hold an answer iff it
is a paragraph piece (segment 0, not <sep>, not padding) or <cls>. With the gold starts it
returns {"train": the head's training outputs}; evaluation (deterministic) also gives
{"eval": its top-k outputs}, which never read the gold starts, so one pass gives the dev
loss and the predictions.
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
      start_n_top, end_n_top, answer_class_start: as QAHead.
    """

    config: ModelConfig
    start_n_top: int = 5
    end_n_top: int = 5
    answer_class_start: str = "expected"

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
        start_positions: jax.Array | None = None,
    ) -> tuple[dict[str, dict[str, jax.Array]], jax.Array, jax.Array]:
        """({"train": ..., "eval": ...} QAHead outputs, new_mems, new_mem_mask); arguments
        as XLNetEncoder, and start_positions int [B], the gold starts: "train" is given
        only with them, "eval" only when deterministic."""
        hidden, new_mems, new_mem_mask = XLNetEncoder(self.config, name="transformer")(
            input_ids, seg_ids, input_mask, mems, mem_mask, deterministic=deterministic
        )
        cls_index = jnp.argmax(input_ids == CLS_ID, axis=-1)
        p_mask = answer_mask(input_ids, seg_ids, input_mask)
        head = QAHead(
            self.config,
            self.start_n_top,
            self.end_n_top,
            self.answer_class_start,
            name="qa_head",
        )
        outputs = {}
        if start_positions is not None:
            outputs["train"] = head(
                hidden, p_mask, cls_index, start_positions, deterministic=deterministic
            )
        if deterministic:
            outputs["eval"] = head(hidden, p_mask, cls_index, deterministic=True)
        return outputs, new_mems, new_mem_mask
