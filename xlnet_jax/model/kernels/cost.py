"""What a kernel call costs, for XLA's cost analysis (`pallas_call(cost_estimate=...)`).

A Pallas call is opaque to XLA: without an estimate its FLOPs count as zero, and the kernel
path's FLOP count (profiles, MFU from XLA's figure, `xlnet-jax compile`'s XLA FLOPs) drops
by the whole attention. Each backend says how many H-wide products a call makes per query
row and head; `estimate` turns that, one exp per score and the bytes of every operand and
result into XLA's figures.
"""

import math

import jax.numpy as jnp
from jax.experimental import pallas as pl


def estimate(qw, products_per_row: int, keys: int, arrays: tuple) -> pl.CostEstimate:
    """The estimate of one call over qw [B, N, Qp, H] (each query row and head).

    Args:
      qw: the padded query-side operand, [B, N, Qp, H].
      products_per_row: H-wide dot products per (query row, head), all the call's matmuls.
      keys: scores per (query row, head): one exp each.
      arrays: every operand and result (anything with .shape and .dtype).
    """
    batch, heads, rows, width = qw.shape
    per_row = batch * heads * rows
    return pl.CostEstimate(
        flops=2 * per_row * products_per_row * width,
        transcendentals=per_row * keys,
        bytes_accessed=sum(math.prod(a.shape) * jnp.dtype(a.dtype).itemsize for a in arrays),
    )
