"""Analytic model FLOPs of one training step: both streams, the memory and the LM head.

Counts multiply-adds as 2 FLOPs for every matmul; a training step is 3x the forward
(forward + backward for activations and weights). Rematerialisation is not counted: this is
model FLOPs, the numerator of MFU.
"""

import ml_collections


def forward_flops_per_row(c: ml_collections.ConfigDict) -> float:
    """Forward FLOPs for one row of seq_len tokens with mem_len memory and num_predict targets."""
    length, mem, targets = c.seq_len, c.mem_len, c.num_predict
    keys = mem + length
    positions = keys + length  # relative encodings: distances klen .. -qlen+1
    directions = 2 if c.bi_data else 1
    proj = c.d_model * c.n_head * c.d_head  # one [d_model, n_head, d_head] kernel
    width = c.n_head * c.d_head

    def attention(rows: int) -> float:
        content_term = 2 * rows * keys * width  # (q + r_w) . k
        position_term = 2 * rows * positions * width  # (q + r_r) . R, before the gather
        segment_term = 2 * rows * 2 * width  # (q + r_s) . seg_embed
        values = 2 * rows * keys * width  # probs . v
        q_and_out = 2 * 2 * rows * proj
        ffn = 2 * 2 * rows * c.d_model * c.d_inner
        return content_term + position_term + segment_term + values + q_and_out + ffn

    keys_values = 2 * 2 * keys * proj  # k and v over memory + segment, content stream only
    relative = 2 * positions * proj * directions / c.batch_size * c.grad_accum_steps
    per_layer = attention(length) + attention(targets) + keys_values + relative
    lm_head = 2 * targets * c.d_model * c.vocab_size
    return c.n_layer * per_layer + lm_head


def train_flops_per_step(c: ml_collections.ConfigDict) -> float:
    """Model FLOPs of one optimiser step over the global batch (3x forward)."""
    return 3.0 * forward_flops_per_row(c) * c.batch_size


def finetune_flops_per_step(config: ml_collections.ConfigDict, rows_per_feature: int) -> float:
    """Analytic FLOPs of one step (3x forward) of the content stream over every segment:
    pretraining's count (model/flops.py) with no targets and no LM head; the relative
    encodings once per model call (each segment of each micro-batch)."""
    rows = config.batch_size * rows_per_feature * config.num_segments
    memory = config.mem_len if config.num_segments > 1 else 0
    calls = config.grad_accum_steps * config.num_segments
    view = ml_collections.ConfigDict(
        {**config.to_dict(), "num_predict": 0, "mem_len": memory, "bi_data": False,
         "batch_size": rows, "grad_accum_steps": calls}
    )  # fmt: skip
    return train_flops_per_step(view)
