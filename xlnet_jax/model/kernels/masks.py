"""The permutation mask as O(B·L) vectors, and their per-row / per-key form for the kernel.

A `PermOrder` says everything `plm.perm_mask` says in three int32 [B, L] vectors:
query i may NOT attend segment key j iff

    block[i] < block[j]  or  (block[i] == block[j] and self_rank[i] <= key_rank[j])

(block 0 is the reuse block, 1 the new block; a key outside the order has key_rank
UNORDERED, below every self rank). The content stream additionally sees itself; memory
keys are visible unless marked as padding. The kernel rebuilds a mask tile from these
vectors, so no [B, Q, K] mask exists on its path; `dense()` is the [B, L, L] mask for the
XLA path.

Fine-tuning's padding masks are the same vectors (`padding_order`): every position in one
block, real keys UNORDERED (seen by every row), padded keys at key_rank HIDDEN (seen by no
row but their own position); a padded memory key gets block HIDDEN, above every row's.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

# key_rank of a key outside the factorization order: every row sees it.
UNORDERED = -(2**30)
# Position of a memory key, and of a row that does not see itself (query stream).
NO_KEY_POSITION = -(2**30)
NO_ROW_POSITION = -(2**30) + 1
# block of a memory key: below every segment block, so always visible.
MEMORY_BLOCK = -1
# key_rank of a padded key (after every self rank: its block's rows do not see it), and
# block of a padded memory key (above every row's block: no row sees it).
HIDDEN = 2**30
# Score of a blocked key, as the XLA path (exp of it is 0 unless the whole row is blocked).
BLOCKED = -1e30

# Columns of the row info [B, Q, ROW_FIELDS] and rows of the key info [B, KEY_FIELDS, K].
SELF_RANK, ROW_BLOCK, ROW_POSITION, ROW_SEGMENT = range(4)
KEY_RANK, KEY_BLOCK, KEY_POSITION, KEY_SEGMENT = range(4)
ROW_FIELDS = KEY_FIELDS = 4


class PermOrder(NamedTuple):
    """A permutation mask of a batch as O(B·L) int32 vectors (see the module doc)."""

    self_rank: jax.Array  # int32 [B, L]
    key_rank: jax.Array  # int32 [B, L]; UNORDERED outside the order
    block: jax.Array  # int32 [B, L]; 0 reuse block, 1 new block

    def dense(self) -> jax.Array:
        """bool [B, L, L], True where query i may not attend key j (plm.perm_mask's form)."""
        row_block, key_block = self.block[:, :, None], self.block[:, None, :]
        later = self.self_rank[:, :, None] <= self.key_rank[:, None, :]
        return (row_block < key_block) | ((row_block == key_block) & later)


def blocked(self_rank, row_block, row_position, key_rank, key_block, key_position) -> jax.Array:
    """bool: query rows (fields broadcast as columns) may not attend keys (fields as rows).

    The one definition of a tile's mask, for both kernel backends (see the module doc)."""
    later = self_rank <= key_rank
    hidden = (row_block < key_block) | ((row_block == key_block) & later)
    return hidden & (row_position != key_position)


def row_info(order: PermOrder, seg_ids: jax.Array, positions: jax.Array, sees_self: bool):
    """int32 [B, Q, ROW_FIELDS]: what the kernel needs of the query rows at `positions` [B, Q]."""

    def at_rows(x):
        return jnp.take_along_axis(x, positions, axis=1)

    own_position = positions if sees_self else jnp.full_like(positions, NO_ROW_POSITION)
    fields = (at_rows(order.self_rank), at_rows(order.block), own_position, at_rows(seg_ids))
    return jnp.stack([f.astype(jnp.int32) for f in fields], axis=-1)


def padding_order(input_mask: jax.Array) -> PermOrder:
    """The content stream's mask of fine-tuning as a PermOrder: bool input_mask [B, L] (True
    at padding) -> every row sees every real key and itself, no other padded key.

    dense() is input_mask broadcast over the rows (the content stream adds its own position)."""
    zeros = jnp.zeros(input_mask.shape, jnp.int32)
    key_rank = jnp.where(input_mask.astype(bool), HIDDEN, UNORDERED).astype(jnp.int32)
    return PermOrder(self_rank=zeros, key_rank=key_rank, block=zeros + 1)


def key_info(
    order: PermOrder, seg_ids: jax.Array, mem_len: int, mem_mask: jax.Array | None = None
) -> jax.Array:
    """int32 [B, KEY_FIELDS, M + L]: the keys [memory ; segment]. Memory is type 0 and
    visible, but where mem_mask (bool [B, M], True at padding; None: none) hides it."""
    batch, length = seg_ids.shape

    def keys(memory_value, segment_values):
        memory = jnp.broadcast_to(jnp.asarray(memory_value, jnp.int32), (batch, mem_len))
        return jnp.concatenate([memory, segment_values.astype(jnp.int32)], axis=1)

    memory_block = MEMORY_BLOCK
    if mem_mask is not None:
        memory_block = jnp.where(mem_mask.astype(bool), HIDDEN, MEMORY_BLOCK)
    positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    fields = (
        keys(UNORDERED, order.key_rank),
        keys(memory_block, order.block),
        keys(NO_KEY_POSITION, positions),
        keys(0, seg_ids),
    )
    return jnp.stack(fields, axis=1)
