"""Checksums of every saved array, computed on device: orbax reads a corrupted (not
truncated) file silently, so a restore compares each array's bits with those saved."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from xlnet_jax.checkpoint.meta import DamagedStep


def _as_uint32_words(x: jax.Array) -> jax.Array:
    """x's bit pattern as uint32 words: one per element (two for 8-byte dtypes)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    if x.dtype.itemsize >= 4:
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    narrow = jnp.dtype(f"uint{8 * x.dtype.itemsize}")
    return jax.lax.bitcast_convert_type(x, narrow).astype(jnp.uint32)


def _leaf_checksum(x: jax.Array) -> jax.Array:
    """sum(word_i * (2i + 1)) mod 2**32 over x's bit pattern.

    Integer sums are exact in any order, so the value does not depend on the sharding; the
    odd weights make any change to a single word change the sum (and most swaps of two).
    """
    words = _as_uint32_words(jnp.asarray(x))
    index = jnp.zeros(words.shape, jnp.uint32)
    stride = 1
    for dim in reversed(range(words.ndim)):
        iota = jax.lax.broadcasted_iota(jnp.uint32, words.shape, dim)
        index = index + iota * jnp.uint32(stride % 2**32)
        stride *= words.shape[dim]
    return jnp.sum(words * (2 * index + 1), dtype=jnp.uint32)


_tree_checksums = jax.jit(functools.partial(jax.tree.map, _leaf_checksum))


def _path_name(path) -> str:
    """A tree path as `a/0/b`, the same for a NamedTuple field and the dict orbax reads back."""
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def tree_checksums(tree) -> dict[str, int]:
    """Checksums of every array leaf, by path; computed on device, one small fetch."""
    sums = jax.tree_util.tree_flatten_with_path(_tree_checksums(tree))[0]
    return {_path_name(path): int(np.asarray(s.addressable_data(0))) for path, s in sums}


def verify_checksums(tree, expected: dict[str, int] | None, item: str) -> None:
    """Raises DamagedStep naming the first array whose bits differ from those saved.

    Checkpoints written before checksums existed (expected is None) are not verified.
    """
    if expected is None:
        return
    actual = tree_checksums(tree)
    if actual.keys() != expected.keys():
        raise DamagedStep(f"{item} holds other arrays than its checksums list")
    for name, value in actual.items():
        if expected[name] != value:
            array = f"{item} array {name}" if name else f"{item} array"
            raise DamagedStep(f"checksum mismatch in {array} (corrupted file)")
