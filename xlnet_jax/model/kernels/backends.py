"""Which kernel backend runs, decided per lowering platform (`jax.lax.platform_dependent`).

TPU: the Mosaic kernel (relative_attention); CUDA: the Triton kernel (triton_attention);
any other platform: INTERPRETED's kernel in Pallas interpret mode (CPU tests). A step
exported or compiled for a platform from a host of another gets that platform's kernel.
"""

import functools

import jax
import jax.numpy as jnp

from xlnet_jax.model.kernels import relative_attention as mosaic
from xlnet_jax.model.kernels import triton_attention as triton

# The kernel that runs in interpret mode off TPU and GPU: "mosaic" or "triton" (tests pick).
INTERPRETED = "mosaic"


def relative_attention(
    q, k, v, k_r, biases, seg_embed, row, key, positions, words, *, dropatt: float,
    strided_roll: bool,
) -> jax.Array:  # fmt: skip
    """One stream's attention (`relative_attention.relative_attention`'s arguments) on the
    lowering platform's kernel; words (uint32 [B, N] or None when dropatt is 0) drop the same
    entries on every backend (kernels.dropout)."""
    on_mosaic = functools.partial(
        mosaic.relative_attention, dropatt=dropatt, strided_roll=strided_roll
    )

    def on_triton(*args, interpret: bool):
        *inputs, words = args
        if words is None:
            words = jnp.zeros((q.shape[0], q.shape[2]), jnp.uint32)
        return triton.relative_attention(*inputs, words, dropatt, interpret=interpret)

    interpreted = (
        on_mosaic if INTERPRETED == "mosaic" else functools.partial(on_triton, interpret=True)
    )
    return jax.lax.platform_dependent(
        q, k, v, k_r, biases, seg_embed, row, key, positions, words,
        tpu=on_mosaic, cuda=functools.partial(on_triton, interpret=False), default=interpreted,
    )  # fmt: skip
