"""Which kernel backend runs, decided per lowering platform (`jax.lax.platform_dependent`).

TPU: the Mosaic kernel (relative_attention); CUDA: the Triton kernel (triton_attention);
any other platform: INTERPRETED's kernel in Pallas interpret mode (CPU tests). A step
exported or compiled for a platform from a host of another gets that platform's kernel.
"""

import functools

import jax

from xlnet_jax.model.kernels import relative_attention as mosaic
from xlnet_jax.model.kernels import triton_attention as triton

# The kernel that runs in interpret mode off TPU and GPU: "mosaic" or "triton" (tests pick).
INTERPRETED = "mosaic"


def relative_attention(
    q, k, v, k_r, biases, seg_embed, row, key, positions, words, rate: float, *, strided_roll: bool
) -> jax.Array:
    """One stream's attention (`triton_attention.relative_attention`'s arguments) on the
    lowering platform's kernel. The Mosaic kernel has no dropout (yet): with rate > 0 only the
    Triton kernel is offered, natively on CUDA and interpreted elsewhere."""

    def on_mosaic(q, k, v, k_r, biases, seg_embed, row, key, positions, words):
        del words
        return mosaic.relative_attention(
            q, k, v, k_r, biases, seg_embed, row, key, positions, strided_roll=strided_roll
        )

    def on_triton(*args, interpret: bool):
        return triton.relative_attention(*args, rate, interpret=interpret)

    interpreted = functools.partial(on_triton, interpret=True)
    branches = {"cuda": functools.partial(on_triton, interpret=False)}
    if rate == 0:
        branches["tpu"] = on_mosaic
        if INTERPRETED == "mosaic":
            interpreted = on_mosaic
    return jax.lax.platform_dependent(
        q, k, v, k_r, biases, seg_embed, row, key, positions, words, default=interpreted, **branches
    )
