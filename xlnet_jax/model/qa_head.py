"""XLNet's SQuAD head: start logits, end logits conditioned on the start, and an answer class.

As the original's `run_squad` (and HF's XLNetForQuestionAnswering, the same three poolers):
  * start: one logit per position, masked by p_mask (1 = cannot be part of an answer).
  * end: dense(concat(h, h_start)) -> tanh -> LayerNorm -> one logit per position. Training
    conditions on the gold start; evaluation on each of the `start_n_top` best starts, and
    keeps the `end_n_top` best ends of each.
  * answer class: dense(concat(h_start, h_cls)) -> tanh -> dropout -> one logit (no bias),
    higher meaning "no answer". h_start is the start-probability-weighted sum of h,
    sum_l softmax(start_logits)_l h_l, so each window has one `cls_logits`. The original
    (function_builder.get_qa_outputs) uses it in training as in evaluation, so the
    answer-class loss also trains the start logits; HF's XLNetForQuestionAnswering trains it
    on h at the gold start instead (answer_class_start "gold"), which for a no-answer window
    is <cls> itself, a shortcut evaluation never offers. Evaluation is the weighted sum in
    both.
The loss is the original's: (start CE + end CE) / 2 + answer-class BCE / 2. Submodule names
follow HF's so the export is a renaming (checkpoint/hf_qa.py).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlnet_jax.config import ModelConfig

NEG_INF = 1e30  # the original's mask value: logits * (1 - p_mask) - 1e30 * p_mask
ANSWER_CLASS_STARTS = ("expected", "gold")  # answer_class_start: the original's, HF's


def _masked(logits: jax.Array, p_mask: jax.Array) -> jax.Array:
    return logits * (1 - p_mask) - NEG_INF * p_mask


def _dense(config: ModelConfig, features: int, name: str, use_bias: bool = True) -> nn.Dense:
    return nn.Dense(
        features,
        use_bias=use_bias,
        kernel_init=nn.initializers.normal(config.initializer_range),
        name=name,
    )


class StartLogits(nn.Module):
    """Start logits [B, L] from hidden [B, L, D], unmasked."""

    config: ModelConfig

    @nn.compact
    def __call__(self, hidden: jax.Array) -> jax.Array:
        return _dense(self.config, 1, "dense")(hidden)[..., 0]


class EndLogits(nn.Module):
    """End logits [..., L] from hidden [..., L, D] and the start's state broadcast to it."""

    config: ModelConfig

    @nn.compact
    def __call__(self, hidden: jax.Array, start_states: jax.Array) -> jax.Array:
        x = jnp.tanh(
            _dense(self.config, self.config.d_model, "dense_0")(
                jnp.concatenate([hidden, start_states], axis=-1)
            )
        )
        x = nn.LayerNorm(epsilon=self.config.layer_norm_eps, name="layer_norm")(x)
        return _dense(self.config, 1, "dense_1")(x)[..., 0]


class AnswerClass(nn.Module):
    """The no-answer logit [B] from the start's state [B, D] and <cls>'s state [B, D]."""

    config: ModelConfig
    deterministic: bool

    @nn.compact
    def __call__(self, start_state: jax.Array, cls_state: jax.Array) -> jax.Array:
        x = _dense(self.config, self.config.d_model, "dense_0")(
            jnp.concatenate([start_state, cls_state], axis=-1)
        )
        x = nn.Dropout(self.config.dropout)(jnp.tanh(x), deterministic=self.deterministic)
        return _dense(self.config, 1, "dense_1", use_bias=False)(x)[..., 0]


class QAHead(nn.Module):
    """The head over the encoder's last hidden states.

    Attributes:
      config: the model config (d_model, initializer_range, layer_norm_eps, dropout).
      start_n_top, end_n_top: the starts kept in evaluation, and the ends kept per start.
      answer_class_start: the start state the answer class reads in training: "expected"
        (the start-probability-weighted state, the original's) or "gold" (HF's).
    """

    config: ModelConfig
    start_n_top: int = 5
    end_n_top: int = 5
    answer_class_start: str = "expected"

    @nn.compact
    def __call__(
        self,
        hidden: jax.Array,
        p_mask: jax.Array,
        cls_index: jax.Array,
        start_positions: jax.Array | None = None,
        *,
        deterministic: bool,
    ) -> dict[str, jax.Array]:
        """Training outputs when start_positions is given, else evaluation outputs.

        Args:
          hidden: [B, L, D] the encoder's output.
          p_mask: [B, L], 1 where no answer may start or end.
          cls_index: int [B], the position of <cls>.
          start_positions: int [B], the gold starts (training), or None.
          deterministic: disables the answer class's dropout.

        Returns:
          training: start_logits, end_logits [B, L] (masked), cls_logits [B].
          evaluation: start_top_log_probs, start_top_index [B, start_n_top];
            end_top_log_probs, end_top_index [B, start_n_top, end_n_top] (row i: the ends
            for start i); cls_logits [B].
        """
        hidden = hidden.astype(jnp.float32)
        p_mask = p_mask.astype(jnp.float32)
        rows = jnp.arange(hidden.shape[0])
        cls_state = hidden[rows, cls_index]
        end_head = EndLogits(self.config, name="end_logits")
        answer_class = AnswerClass(self.config, deterministic, name="answer_class")
        start_logits = _masked(StartLogits(self.config, name="start_logits")(hidden), p_mask)
        expected_start = jnp.einsum("bld,bl->bd", hidden, jax.nn.softmax(start_logits, axis=-1))
        if start_positions is not None:
            if self.answer_class_start not in ANSWER_CLASS_STARTS:
                raise ValueError(f"answer_class_start: one of {ANSWER_CLASS_STARTS}")
            start_state = hidden[rows, start_positions]
            end_logits = end_head(hidden, jnp.broadcast_to(start_state[:, None], hidden.shape))
            gold = self.answer_class_start == "gold"
            return {
                "start_logits": start_logits,
                "end_logits": _masked(end_logits, p_mask),
                "cls_logits": answer_class(start_state if gold else expected_start, cls_state),
            }
        start_log_probs = jax.nn.log_softmax(start_logits, axis=-1)
        start_top_log_probs, start_top_index = jax.lax.top_k(start_log_probs, self.start_n_top)
        start_states = hidden[rows[:, None], start_top_index]  # [B, K, D]
        expanded = jnp.broadcast_to(hidden[:, None], (*start_states.shape[:2], *hidden.shape[1:]))
        end_logits = end_head(
            expanded, jnp.broadcast_to(start_states[:, :, None], expanded.shape)
        )  # [B, K, L]
        end_log_probs = jax.nn.log_softmax(_masked(end_logits, p_mask[:, None]), axis=-1)
        end_top_log_probs, end_top_index = jax.lax.top_k(end_log_probs, self.end_n_top)
        return {
            "start_top_log_probs": start_top_log_probs,
            "start_top_index": start_top_index,
            "end_top_log_probs": end_top_log_probs,
            "end_top_index": end_top_index,
            "cls_logits": answer_class(expected_start, cls_state),
        }


def qa_losses(
    outputs: dict[str, jax.Array],
    start_positions: jax.Array,
    end_positions: jax.Array,
    is_impossible: jax.Array,
) -> jax.Array:
    """The original's loss of each window [B] (its mean over a batch is the original's):
    (CE(start) + CE(end)) / 2 + BCE(cls_logits, is_impossible) / 2."""

    def cross_entropy(logits, positions):
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(log_probs, positions[:, None], axis=-1)[:, 0]

    start = cross_entropy(outputs["start_logits"], start_positions)
    end = cross_entropy(outputs["end_logits"], end_positions)
    cls = sigmoid_cross_entropy(outputs["cls_logits"], is_impossible.astype(jnp.float32))
    return (start + end) * 0.5 + cls * 0.5


def sigmoid_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Sigmoid cross-entropy per example, in the stable form max(x,0) - x*y + log1p(e^-|x|)."""
    return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))
