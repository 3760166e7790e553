"""Small shared test helpers: configs, synthetic batches and float32 comparisons."""

import jax
import numpy as np

from xlnet_jax.model.kernels.gpu import tiles as gpu_tiles

SEP, CLS = 4, 3


def synthetic_batch(config, step: int) -> dict:
    """A random batch with the stream layout's functional tokens (<sep> ... <sep> <cls>)."""
    rng = np.random.default_rng(step)
    rows, length = config.batch_size, config.seq_len
    ids = rng.integers(9, config.vocab_size, (rows, length)).astype(np.int32)
    ids[:, [length - 3, length - 1]] = SEP
    ids[:, length - 1] = CLS
    seg = np.zeros((rows, length), np.int32)
    seg[:, (length + config.reuse_len) // 2 :] = 1
    seg[:, -1] = 2
    return {
        "input_ids": ids,
        "seg_ids": seg,
        "is_word_start": rng.random((rows, length)) < 0.7,
        "is_functional": np.isin(ids, [SEP, CLS]),
        "is_backward": np.arange(rows) % 2 == 1 if config.bi_data else np.zeros(rows, bool),
    }


F32_EPS = float(np.finfo(np.float32).eps)  # 2**-23: one float32 rounding, relative.

# Against HF (another library: other op orders, its own gelu/softmax/LayerNorm kernels). A
# reordered float32 sum of n terms drifts like a random walk, ~sqrt(n) roundings at the output's
# scale; the tests' 2 layers chain ~20 contractions of at most 64 terms: 20 x sqrt(64) = 160
# roundings of the logits' (or mems') scale. Measured: 2-3.
HF_PARITY_ROUNDINGS = 160


def assert_f32_close(actual, expected, *, roundings: float, err_msg: str = "") -> None:
    """Asserts agreement to `roundings` float32 roundings at the scale of `expected`.

    The same math done in another order (another fusion, sharding, CPU or library) differs by
    rounding, and a reordered sum's error grows with the magnitude of what was summed, not with
    each element's own value: an element near zero carries the rounding of its neighbours'
    scale. So the bound is |actual - expected| <= roundings * eps32 * max|expected|, for every
    element. Each caller derives `roundings` from the computation it compares, never from one
    machine's result.
    """
    measured = f32_roundings(actual, expected)
    assert measured <= roundings, (
        f"{err_msg}: differs by {measured:.1f} float32 roundings of its scale "
        f"{np.abs(np.asarray(expected)).max():.3g}; allowed {roundings}"
    )


def f32_roundings(actual, expected) -> float:
    """max|actual - expected| in float32 roundings of max|expected| (0 for equal arrays)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    error = float(np.abs(actual - expected).max(initial=0.0))
    scale = float(np.abs(expected).max(initial=0.0))
    return 0.0 if error == 0 else error / (F32_EPS * scale) if scale else float("inf")


def assert_trees_f32_close(actual, expected, *, roundings: float) -> None:
    """assert_f32_close for every leaf of two pytrees, each at its own scale."""
    flat_expected = dict(jax.tree_util.tree_leaves_with_path(expected))
    flat_actual = jax.tree_util.tree_leaves_with_path(actual)
    assert len(flat_actual) == len(flat_expected)
    for path, leaf in flat_actual:
        assert_f32_close(
            leaf, flat_expected[path], roundings=roundings, err_msg=jax.tree_util.keystr(path)
        )


# Two trainings of the same steps whose sums run in another order (other devices, shards or
# micro-batches): each step's gradient differs by at most 64 roundings at each leaf's scale
# (reordered sums of at most 64 terms, the tests' widest axis). Adam passes a gradient's relative
# error into its update and the 12 steps' errors add up: 12 x 64 = 768 roundings at the scale of
# the losses, each parameter leaf and the memory.
TRAINING_ROUNDINGS = 768


def assert_same_training(losses, want_losses, params, want_params, mems, want_mems) -> None:
    """Losses, parameters and memory of two trainings agree to float32 rounding."""
    assert_f32_close(losses, want_losses, roundings=TRAINING_ROUNDINGS, err_msg="losses")
    assert_trees_f32_close(params, want_params, roundings=TRAINING_ROUNDINGS)
    assert_f32_close(mems, want_mems, roundings=TRAINING_ROUNDINGS, err_msg="mems")


# The GPU kernel on tiles of 8 (several blocks and padding at the tests' small shapes), for
# Pallas interpret mode: `monkeypatch.setattr(gpu.attention, "GPU_TILES", TILES_OF_8)`.
TILES_OF_8 = gpu_tiles.Tiles(8, *(gpu_tiles.Launch(4, 2),) * 3)
