"""Batches of features: training's a pure function of (seed, step), evaluation's in order.

Training walks the features in one shuffled order per epoch (a permutation drawn from
(seed, epoch)), batch_size at a time across epoch boundaries, so the batch of step t never
depends on what ran before it: a resumed run reads exactly what an uninterrupted one would.
Evaluation reads every feature once, in order; the last batch is filled with copies of
feature 0 at weight 0, so every batch has the compiled shape.

`rows`: the positions of a global batch that one process builds (program.host_rows: the
rows its devices hold; all of them in one process). A process takes only the features at
those positions, so the processes of a multi-host run each gather and send their own share
of every batch, train and eval alike, and together form the one-process batch.
"""

from collections.abc import Iterator

import numpy as np

from xlnet_jax.finetune.task import Features


def _epoch_order(size: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(size)


def train_indices(size: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """The feature indices of training step `step` (0-based)."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    epochs, offsets = np.divmod(positions, size)
    orders = {e: _epoch_order(size, seed, e) for e in np.unique(epochs)}
    return np.array([orders[e][o] for e, o in zip(epochs, offsets, strict=True)])


def take(features: Features, indices: np.ndarray, weight: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of these features, with a "weight" per row."""
    batch = {k: v[indices] for k, v in features.arrays.items()}
    batch["weight"] = weight.astype(np.float32)
    return batch


def train_batch(
    features: Features, batch_size: int, seed: int, step: int, rows: np.ndarray | None = None
) -> dict:
    """Training step `step`'s batch (every row weight 1), or its `rows` only."""
    indices = train_indices(len(features), batch_size, seed, step)
    rows = np.arange(batch_size) if rows is None else rows
    return take(features, indices[rows], np.ones(len(rows)))


def eval_batches(
    features: Features, batch_size: int, rows: np.ndarray | None = None
) -> Iterator[tuple[dict, int]]:
    """(batch, number of real rows of the whole batch) over all features in order; with
    `rows`, each batch holds those rows of it only."""
    rows = np.arange(batch_size) if rows is None else rows
    for start in range(0, len(features), batch_size):
        real = min(batch_size, len(features) - start)
        indices = np.r_[np.arange(start, start + real), np.zeros(batch_size - real, int)]
        yield take(features, indices[rows], rows < real), real
