"""Which kernel backend runs, chosen before tracing from the chip the step is traced for.

TPU: the Mosaic kernel (tpu/); an NVIDIA GPU: the Triton kernel (gpu/); any other chip:
INTERPRETED's kernel in Pallas interpret mode (CPU tests). The chip is the active mesh's
abstract device (kernels.mesh.target_device), so a step compiled for a TPU topology or
exported for a GPU from a CPU host gets that chip's kernel, and only its operands: a
`lax.platform_dependent` choice would keep every branch's operands and residuals (the
Mosaic query stream's float32 [B, N, P, K] bias among them) alive in the CUDA program.
"""

import jax
import jax.numpy as jnp

from xlnet_jax.model.kernels.gpu import attention as triton
from xlnet_jax.model.kernels.tpu import attention as mosaic

# The kernel that runs in interpret mode off TPU and GPU: "mosaic" or "triton" (tests pick).
INTERPRETED = "mosaic"


def backend(platform: str) -> str:
    """The kernel for a chip's platform ("tpu", "gpu", else interpreted): "mosaic" or "triton"."""
    return {"tpu": "mosaic", "gpu": "triton"}.get(platform, INTERPRETED)


def relative_attention(
    q, k, v, k_r, biases, seg_embed, row, key, positions, words, *, dropatt: float,
    strided_roll: bool, platform: str,
) -> jax.Array:  # fmt: skip
    """One stream's attention (`tpu.attention.relative_attention`'s arguments) on the kernel
    of `platform`, the chip traced for; words (uint32 [B, N] or None when dropatt is 0) drop
    the same entries on every backend (kernels.dropout)."""
    if backend(platform) == "mosaic":
        return mosaic.relative_attention(
            q, k, v, k_r, biases, seg_embed, row, key, positions, words,
            dropatt=dropatt, strided_roll=strided_roll,
        )  # fmt: skip
    if words is None:
        words = jnp.zeros((q.shape[0], q.shape[2]), jnp.uint32)
    return triton.relative_attention(
        q, k, v, k_r, biases, seg_embed, row, key, positions, words, dropatt,
        interpret=platform != "gpu",
    )  # fmt: skip
