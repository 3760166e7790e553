"""How closely the kernel must agree with the XLA attention path: the one definition.

`benchmarks/gpu_check.py` and the check before the first step (training/kernel_check.py)
both compare the kernel's loss, new memory and gradients with the XLA path's as the largest
difference over the largest entry of the XLA value, and accept `tolerance(dtype)`.
"""

import jax
import numpy as np

# Agreement of the kernel with the XLA path, in roundings of the dtype at the XLA value's
# scale (largest difference <= ROUNDINGS * eps * largest entry). float32: a reordered sum of
# n terms drifts ~sqrt(n) roundings; 2 layers chain ~20 contractions of at most 1024 terms
# (the keys): 20 x 32 = 640. bfloat16: activations are stored in bf16 between the ops, one
# rounding each, and the two paths store at different points: 4 roundings of 2^-7.
ROUNDINGS = {"float32": 640, "bfloat16": 4}
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7}  # the distance from 1 to the next value


def tolerance(dtype: str) -> float:
    """The largest accepted relative difference for a run in `dtype`."""
    return ROUNDINGS[dtype] * EPS[dtype]


def worst_leaf(actual, expected) -> tuple[float, str]:
    """(largest |actual - expected| over the largest |expected|, the path of the leaf with the
    largest difference), over a whole pytree; a non-finite `actual` entry gives inf."""
    pairs = jax.tree_util.tree_leaves_with_path(expected)
    worst, scale, where = 0.0, 0.0, ""
    for (path, e), a in zip(pairs, jax.tree.leaves(actual), strict=True):
        a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
        if not e.size:  # an empty memory (mem_len 0)
            continue
        difference = float(np.abs(a - e).max()) if np.all(np.isfinite(a)) else np.inf
        if difference > worst or not where:
            worst, where = difference, jax.tree_util.keystr(path, simple=True, separator="/")
        scale = max(scale, float(np.abs(e).max()))
    return (worst / scale if scale else worst), where


def relative_difference(actual, expected) -> float:
    """Largest |actual - expected| over the largest |expected|, over a whole pytree."""
    return worst_leaf(actual, expected)[0]
