"""Span sampling for partial prediction: which tokens of one block become targets.

A jitted, bounded re-implementation of the original `_sample_mask` (zihangdai/xlnet's
data_utils module) for one block of one row, with its word-span bug fixed:

* A span length n in 1..max_span is drawn with p(n) proportional to 1/n, and a context of
  ctx = n * mask_alpha // mask_beta tokens is laid around it (left part uniform in
  [0, ctx), right part the rest), so about mask_beta / (mask_alpha + mask_beta) of the
  block falls in spans.
* A span starts at a word start and covers n WORDS: it ends right before the (n+1)-th word
  boundary. The original aligns only the start and then covers n pieces, cutting words.
* A span never contains a functional token (<sep>, <cls>, <pad>): it stops before one.
  Functional tokens count as word boundaries.
* A span that would overshoot the block's goal is cut back to the whole words that fit
  (the original cuts n to the goal in pieces). If not even its first word fits, or no
  word start is left, the span phase ends.
* A span may end at the block end (the original rejects it); the token after a span is
  thus a word boundary or the block end.
* Then targets are filled uniformly at random among the remaining non-functional tokens
  until the block holds exactly `goal` targets, or all of its eligible tokens where it has
  fewer (the original's fill loop never ends in that case).

Randomness comes in as uint32 words (`jax.random.bits`), so that a whole row costs one
threefry call: each random call is a sizeable kernel for XLA to compile.

Every loop has a static trip count: the span phase is a `lax.scan` of at most
min(goal, ceil(block_len / (1 + ctx(1)))) steps, which is exact: a step that adds no
target ends the phase, and every step advances the cursor by at least 1 + ctx(1).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class SpanDraws(NamedTuple):
    """The spans one block drew, one entry per scan step (entries with valid=False are
    steps after the span phase ended and carry no span)."""

    begin: jax.Array  # int32 [S]: first position of the span.
    end: jax.Array  # int32 [S]: one past the last position of the span.
    drawn_len: jax.Array  # int32 [S]: n as drawn from p(n) ∝ 1/n, before any cut.
    num_words: jax.Array  # int32 [S]: words the span covers after the cuts.
    valid: jax.Array  # bool [S]: the step produced a span.


def context_sizes(max_span: int, mask_alpha: float, mask_beta: float) -> np.ndarray:
    """Context tokens around a span of n words, for n = 0..max_span (static table)."""
    return np.array([int(n * mask_alpha // mask_beta) for n in range(max_span + 1)], np.int32)


def num_span_steps(block_len: int, goal: int, ctx_sizes: np.ndarray) -> int:
    """Static scan length that can never cut the span phase short (see module doc)."""
    stride = 1 + int(ctx_sizes[1])
    return min(goal, -(-block_len // stride))


def _next_true(flags: jax.Array) -> jax.Array:
    """For each i, the smallest j >= i with flags[j], else len(flags)."""
    idx = jnp.arange(flags.shape[0], dtype=jnp.int32)
    return jax.lax.cummin(jnp.where(flags, idx, flags.shape[0]), reverse=True)


def _prev_true(flags: jax.Array) -> jax.Array:
    """For each i, the largest j <= i with flags[j], else -1."""
    idx = jnp.arange(flags.shape[0], dtype=jnp.int32)
    return jax.lax.cummax(jnp.where(flags, idx, -1))


def num_random_words(block_len: int, goal: int, max_span: int, alpha: float, beta: float) -> int:
    """uint32 words `sample_block_targets` consumes for one block: two per span step
    (length and left context), one per token (the random fill)."""
    return 2 * num_span_steps(block_len, goal, context_sizes(max_span, alpha, beta)) + block_len


def uniform(words: jax.Array) -> jax.Array:
    """float32 in [0, 1) from uint32 words (their top 24 bits)."""
    return (words >> 8).astype(jnp.float32) * (1.0 / (1 << 24))


def draw_span_lengths(words: jax.Array, max_span: int) -> jax.Array:
    """int32 n in 1..max_span with p(n) proportional to 1/n, by inverting the CDF."""
    p = 1.0 / np.arange(1, max_span + 1)
    cdf = jnp.asarray(np.cumsum(p / p.sum())[:-1], jnp.float32)
    return 1 + jnp.sum(uniform(words)[:, None] >= cdf[None, :], axis=1, dtype=jnp.int32)


def sample_spans(
    words: jax.Array,
    is_word_start: jax.Array,
    is_functional: jax.Array,
    goal: int,
    max_span: int,
    mask_alpha: float,
    mask_beta: float,
) -> tuple[jax.Array, SpanDraws]:
    """Draws word-aligned spans over one block, in the block's own (forward) order.

    Args:
      words: uint32 [2 * num_span_steps(...)] random words.
      is_word_start: bool [N], the piece begins a word.
      is_functional: bool [N], <sep>/<cls>/<pad>: never inside a span.
      goal: static number of targets wanted in this block.
      max_span: longest span in words.
      mask_alpha: context scale (numerator).
      mask_beta: context scale (denominator).

    Returns:
      (in_span bool [N], the SpanDraws); in_span holds at most `goal` tokens.
    """
    n_tok = is_word_start.shape[0]
    ctx_sizes = context_sizes(max_span, mask_alpha, mask_beta)
    steps = num_span_steps(n_tok, goal, ctx_sizes)
    boundary = is_word_start | is_functional
    start_ok = is_word_start & ~is_functional
    # Arrays of length N + 1 so that the block end (position N) can be looked up.
    ext_false = jnp.zeros((1,), bool)
    ext_true = jnp.ones((1,), bool)
    next_start = _next_true(jnp.concatenate([start_ok, ext_false]))
    next_func = _next_true(jnp.concatenate([is_functional, ext_true]))
    prev_boundary = _prev_true(jnp.concatenate([boundary, ext_true]))
    words_upto = jnp.cumsum(boundary.astype(jnp.int32))  # boundaries in [0, i]
    # boundary_pos[k] = position of the (k+1)-th boundary; then the block end.
    boundary_pos = jnp.concatenate(
        [
            jnp.nonzero(boundary, size=n_tok, fill_value=n_tok)[0].astype(jnp.int32),
            jnp.full((1,), n_tok, jnp.int32),
        ]
    )
    ctx_table = jnp.asarray(ctx_sizes)

    def step(carry, draw):
        cursor, count, done = carry
        drawn, ctx_frac = draw
        remaining = goal - count
        n = jnp.minimum(drawn, jnp.maximum(remaining, 1))
        ctx = ctx_table[n]
        left = jnp.minimum((ctx_frac * ctx).astype(jnp.int32), jnp.maximum(ctx - 1, 0))
        begin = next_start[jnp.minimum(cursor + left, n_tok)]
        safe_begin = jnp.minimum(begin, n_tok - 1)
        word_end = boundary_pos[jnp.minimum(words_upto[safe_begin] + n - 1, n_tok)]
        end = jnp.minimum(word_end, next_func[safe_begin])
        end = jnp.where(
            end - begin > remaining,
            prev_boundary[jnp.minimum(begin + remaining, n_tok)],
            end,
        )
        valid = ~done & (begin < n_tok) & (end > begin)
        num_words = words_upto[jnp.clip(end - 1, 0, n_tok - 1)] - words_upto[safe_begin] + 1
        count = count + jnp.where(valid, end - begin, 0)
        new_carry = (end + ctx - left, count, done | ~valid | (count >= goal))
        return new_carry, SpanDraws(begin, end, drawn, jnp.where(valid, num_words, 0), valid)

    init = (jnp.int32(0), jnp.int32(0), jnp.bool_(goal == 0))
    draws = (draw_span_lengths(words[:steps], max_span), uniform(words[steps : 2 * steps]))
    _, spans = jax.lax.scan(step, init, draws)
    pos = jnp.arange(n_tok)
    covered = spans.valid[:, None] & (spans.begin[:, None] <= pos) & (pos < spans.end[:, None])
    return jnp.any(covered, axis=0), spans


def fill_to_goal(words: jax.Array, chosen: jax.Array, eligible: jax.Array, goal: int) -> jax.Array:
    """Adds uniformly random eligible, unchosen tokens until `goal` are chosen (or all
    eligible ones are). `words` is uint32 [N]. Returns the new bool [N] selection."""
    free = eligible & ~chosen
    missing = goal - jnp.sum(chosen, dtype=jnp.int32)
    scores = jnp.where(free, words >> 1, jnp.uint32(0xFFFFFFFF))  # free tokens sort first
    order = jnp.argsort(scores)
    order_of = jnp.zeros(chosen.shape, jnp.int32).at[order].set(jnp.arange(chosen.shape[0]))
    return chosen | (free & (order_of < missing))


def sample_block_targets(
    words: jax.Array,
    is_word_start: jax.Array,
    is_functional: jax.Array,
    goal: int,
    max_span: int,
    mask_alpha: float,
    mask_beta: float,
) -> tuple[jax.Array, SpanDraws]:
    """Spans, then random fill: exactly min(goal, #non-functional) targets of one block.

    Args as in `sample_spans`, but `words` holds num_random_words(...) uint32 words.
    Returns (is_target bool [N], SpanDraws).
    """
    n_tok = is_word_start.shape[0]
    in_span, spans = sample_spans(
        words[:-n_tok], is_word_start, is_functional, goal, max_span, mask_alpha, mask_beta
    )
    return fill_to_goal(words[-n_tok:], in_span, ~is_functional, goal), spans
