"""What a kernel call costs, for XLA's cost analysis (`pallas_call(cost_estimate=...)`).

A Pallas call is opaque to XLA: without an estimate its FLOPs count as zero, and the kernel
path's FLOP count (profiles, MFU from XLA's figure, `xlnet-jax compile`'s xla_flops) drops
by the whole attention. Both backends describe a call the same way: `matmuls` products of
[rows, keys] x width per (row, head), as executed on the padded tiles, one exp per score,
and the bytes of every operand and result.
"""

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def estimate(
    qw: jax.Array, num_keys: int, matmuls: int, arrays: tuple, exps_per_score: int = 1
) -> pl.CostEstimate:
    """The estimate of one call over qw [B, N, Qp, H] and num_keys (Kp) keys per row.

    Args:
      qw: the padded query-side operand, [B, N, Qp, H].
      num_keys: Kp, the padded keys every row is scored against.
      matmuls: [Qp, Kp, H] products per (row, head), counted in units of one score tile.
      arrays: every operand and result (anything with .shape and .dtype).
      exps_per_score: transcendentals per score.
    """
    batch, heads, rows, width = qw.shape
    scores = batch * heads * rows * num_keys
    return pl.CostEstimate(
        flops=2 * matmuls * scores * width,
        transcendentals=exps_per_score * scores,
        bytes_accessed=sum(math.prod(a.shape) * jnp.dtype(a.dtype).itemsize for a in arrays),
    )
