"""The permutation-LM objective as jitted pure functions: targets, orders and masks.

`sample_plm` turns a batch of O(B·L) token arrays into a PLM sample (targets and a
factorization order per row); `perm_mask` expands a sample into the [B, L, L] attention
mask inside the jitted step, so no L x L array ever crosses host -> device.

Layout of a row: the reuse block [0, reuse_len) (next step's memory) followed by the new
block [reuse_len, seq_len) = A <sep> B <sep> <cls>. Each block gets its own targets
(num_predict // 2 in the new block, the rest in the reuse block; all of them in the one
block when reuse_len == 0); how targets are drawn is in `plm_spans`.

The order (original `_local_perm`, called once for the reuse block and once for the new
block): each block draws its own random permutation of perm_size positions, shared by that
block's consecutive sub-blocks of perm_size; the two blocks' permutations are independent.
Ranks grow sub-block by sub-block, so the reuse block is ordered before the new block. Tokens
that are neither targets nor functional get rank -1: they come first, everyone sees them and
they see no target.

Mask (True = query i may NOT attend key j), as the original builds it block by block:
  within a block: perm_mask[i, j] = self_rank[i] <= rank[j] and j is a target or
                  functional token;
  across blocks:  the reuse block sees nothing of the new block (True), and the new
                  block sees all of the reuse block (False), because the reuse block is
                  earlier in the factorization order;
with self_rank = rank for targets (a target never sees itself: query stream) and
rank + 1 otherwise. The content stream uses perm_mask & ~eye; memory is always visible.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from xlnet_jax.config import FIELDS, view, view_problem
from xlnet_jax.model.kernels.masks import UNORDERED, PermOrder
from xlnet_jax.objective import spans

PLMConfig = view(
    "PLMConfig",
    "objective",
    FIELDS,
    "The objective's hashable view of the config (a static jit argument).",
    __name__,
)


# Functional tokens at the end of the new block: A <sep> B <sep> <cls>.
NUM_FUNCTIONAL = 3


def target_blocks(cfg: PLMConfig) -> tuple[tuple[int, int, int], ...]:
    """(start, end, goal) of each block of a row: the reuse block (if any), then the new
    block, which holds num_predict // 2 targets (all of them without a reuse block)."""
    if cfg.reuse_len == 0:
        return ((0, cfg.seq_len, cfg.num_predict),)
    new_goal = cfg.num_predict // 2
    return (
        (0, cfg.reuse_len, cfg.num_predict - new_goal),
        (cfg.reuse_len, cfg.seq_len, new_goal),
    )


def validate_plm_config(cfg: PLMConfig) -> None:
    """Rejects configs the sampler cannot honour, before anything is compiled.

    Raises:
      ValueError: naming the offending field and the constraint it breaks.
    """

    def check(ok: bool, field: str, message: str) -> None:
        if not ok:
            raise ValueError(f"{field}: {message}")

    problem = view_problem(cfg)
    if problem:
        raise ValueError(problem)
    check(cfg.seq_len > NUM_FUNCTIONAL, "seq_len", f"must be > {NUM_FUNCTIONAL}, got {cfg.seq_len}")
    check(
        cfg.reuse_len < cfg.seq_len - NUM_FUNCTIONAL,
        "reuse_len",
        f"must be < seq_len - {NUM_FUNCTIONAL} = {cfg.seq_len - NUM_FUNCTIONAL} "
        f"(the new block holds A <sep> B <sep> <cls>), got {cfg.reuse_len}",
    )
    for start, end, goal in target_blocks(cfg):
        name = "reuse" if end == cfg.reuse_len else "new"
        eligible = end - start - (NUM_FUNCTIONAL if name == "new" else 0)
        check(
            goal <= eligible,
            "num_predict",
            f"{cfg.num_predict} puts {goal} targets in the {name} block "
            f"[{start}, {end}), which has only {eligible} non-functional tokens",
        )
        length = "reuse_len" if name == "reuse" else "seq_len - reuse_len"
        check(
            (end - start) % cfg.perm_size == 0,
            "perm_size",
            f"{cfg.perm_size} must divide the {name} block length {length} = {end - start}",
        )


class PLMSample(NamedTuple):
    """Targets and factorization order of a batch; every field is O(B·L)."""

    ranks: jax.Array  # int32 [B, L]: rank in the order; -1 for non-target non-functional.
    is_target: jax.Array  # bool [B, L]
    target_pos: jax.Array  # int32 [B, P]: target positions, ascending; padding points at 0.
    target_ids: jax.Array  # int32 [B, P]: input_ids at target_pos; 0 for padding.
    target_weights: jax.Array  # float32 [B, P]: 1 for real targets, 0 for padding.


def _forward_order(x: jax.Array, is_backward: jax.Array) -> jax.Array:
    """The block in forward text order: reversed for a backward row (an involution)."""
    return jnp.where(is_backward, x[::-1], x)


def _row_targets(
    words: jax.Array,
    is_word_start: jax.Array,
    is_functional: jax.Array,
    is_backward: jax.Array,
    cfg: PLMConfig,
) -> jax.Array:
    """bool [L] targets of one row from uint32 random words, block by block. A backward
    row holds its stream reversed: each block is flipped to forward text order, sampled,
    and flipped back."""
    parts = []
    for start, end, goal in target_blocks(cfg):
        span_args = (goal, cfg.max_span, cfg.mask_alpha, cfg.mask_beta)
        block_words, words = jnp.split(words, [spans.num_random_words(end - start, *span_args)])
        chosen, _ = spans.sample_block_targets(
            block_words,
            _forward_order(is_word_start[start:end], is_backward),
            _forward_order(is_functional[start:end], is_backward),
            *span_args,
        )
        parts.append(_forward_order(chosen, is_backward))
    return jnp.concatenate(parts)


def _num_order_words(cfg: PLMConfig) -> int:
    """uint32 random words one row's order consumes: perm_size for each block."""
    return cfg.perm_size * len(target_blocks(cfg))


def _num_row_words(cfg: PLMConfig) -> int:
    """uint32 random words one row consumes: its blocks' targets, then its order."""
    span_args = (cfg.max_span, cfg.mask_alpha, cfg.mask_beta)
    blocks = target_blocks(cfg)
    targets = sum(spans.num_random_words(e - s, g, *span_args) for s, e, g in blocks)
    return targets + _num_order_words(cfg)


def _local_ranks(words: jax.Array, cfg: PLMConfig) -> jax.Array:
    """int32 [L]: per block (reuse, new), one random permutation of perm_size (the sort order
    of that block's perm_size random words; a tie, p ~ perm_size**2 / 2**33, goes to the lower
    position) applied to each of the block's perm_size sub-blocks, offset by the sub-block's
    start, so earlier sub-blocks rank before later ones. Blocks start at multiples of
    perm_size (validated), so a sub-block's offset is its position rounded down."""
    parts = []
    block_words = jnp.split(words, len(target_blocks(cfg)))
    for (start, end, _), sub_words in zip(target_blocks(cfg), block_words, strict=True):
        sigma = jnp.argsort(sub_words).astype(jnp.int32)
        pos = jnp.arange(start, end, dtype=jnp.int32)
        parts.append((pos // cfg.perm_size) * cfg.perm_size + sigma[pos % cfg.perm_size])
    return jnp.concatenate(parts)


def _sample_row(
    key: jax.Array,
    input_ids: jax.Array,
    is_word_start: jax.Array,
    is_functional: jax.Array,
    is_backward: jax.Array,
    cfg: PLMConfig,
) -> PLMSample:
    """PLMSample fields (unbatched) of one row from its own key (one threefry call)."""
    words = jax.random.bits(key, (_num_row_words(cfg),), jnp.uint32)
    target_words, order_words = jnp.split(words, [words.shape[0] - _num_order_words(cfg)])
    is_target = _row_targets(target_words, is_word_start, is_functional, is_backward, cfg)
    ranks = _local_ranks(order_words, cfg)
    ranks = jnp.where(is_target | is_functional, ranks, -1)
    num_real = jnp.sum(is_target, dtype=jnp.int32)
    target_pos = jnp.nonzero(is_target, size=cfg.num_predict, fill_value=0)[0].astype(jnp.int32)
    is_real = jnp.arange(cfg.num_predict) < num_real
    target_ids = jnp.where(is_real, input_ids[target_pos], 0).astype(jnp.int32)
    return PLMSample(ranks, is_target, target_pos, target_ids, is_real.astype(jnp.float32))


@functools.partial(jax.jit, static_argnames="cfg")
def sample_plm(
    key: jax.Array,
    input_ids: jax.Array,
    is_word_start: jax.Array,
    is_functional: jax.Array,
    is_backward: jax.Array,
    cfg: PLMConfig,
) -> PLMSample:
    """Samples targets and a factorization order for every row of a batch.

    Args:
      key: PRNG key; row b uses fold_in(key, b), so rows are independent and the sample
        is a pure function of (key, inputs).
      input_ids: int32 [B, L].
      is_word_start: bool [B, L], the piece begins a word ('▁', '<' or punctuation piece).
      is_functional: bool [B, L], <sep>, <cls> or <pad>: never a target, always ordered.
      is_backward: bool [B], the row holds its stream reversed (bi_data).
      cfg: static PLMConfig; validated at trace time.

    Returns:
      PLMSample with exactly cfg.num_predict targets per row (weight-0 padding only where
      a block has fewer non-functional tokens than its goal).
    """
    validate_plm_config(cfg)
    if input_ids.shape[-1] != cfg.seq_len:
        raise ValueError(f"seq_len: {cfg.seq_len} != input length {input_ids.shape[-1]}")

    def sample_row(*row_inputs):
        # The row index comes from the vmap axis, so it follows the inputs' sharding.
        row_key = jax.random.fold_in(key, jax.lax.axis_index("rows"))
        return _sample_row(row_key, *row_inputs, cfg)

    return jax.vmap(sample_row, axis_name="rows")(
        input_ids, is_word_start, is_functional, is_backward
    )


@functools.partial(jax.jit, static_argnames="reuse_len")
def perm_mask(sample: PLMSample, is_functional: jax.Array, reuse_len: int) -> jax.Array:
    """bool [B, L, L]: True where query i may NOT attend key j (see the module doc).

    Built inside the jitted step from O(B·L) inputs. The content stream adds the diagonal
    back (perm_mask & ~eye); memory is not part of this mask.
    """
    ranks = sample.ranks
    ordered = sample.is_target | is_functional
    self_rank = jnp.where(sample.is_target, ranks, ranks + 1)
    later = (self_rank[:, :, None] <= ranks[:, None, :]) & ordered[:, None, :]
    in_reuse = jnp.arange(ranks.shape[-1]) < reuse_len
    # Rows of the reuse block: blocked from the whole new block. Rows of the new block:
    # the whole reuse block is visible.
    return jnp.where(in_reuse[:, None], later | ~in_reuse[None, :], later & ~in_reuse[None, :])


@functools.partial(jax.jit, static_argnames="reuse_len")
def perm_order(sample: PLMSample, is_functional: jax.Array, reuse_len: int) -> PermOrder:
    """perm_mask as O(B·L) vectors (PermOrder.dense() equals perm_mask), for the kernel."""
    ranks = sample.ranks
    block = (jnp.arange(ranks.shape[-1]) >= reuse_len).astype(jnp.int32)
    return PermOrder(
        self_rank=jnp.where(sample.is_target, ranks, ranks + 1),
        key_rank=jnp.where(sample.is_target | is_functional, ranks, UNORDERED),
        block=jnp.broadcast_to(block, ranks.shape),
    )
