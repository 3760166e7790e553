"""Tests of the permutation-LM objective: target counts, span statistics, orders, masks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlnet_jax.objective import plm
from xlnet_jax.objective import spans as span_sampler

BATCH = 4  # One batch size everywhere: each (config, shape) compiles once per session.
# A few shapes; fields: seq_len, reuse_len, num_predict,
# perm_size, mask_alpha, mask_beta, max_span.
CONFIGS = (
    plm.PLMConfig(32, 16, 5, 8, 6, 1, 5),
    plm.PLMConfig(48, 0, 8, 16, 6, 1, 5),
    plm.PLMConfig(64, 32, 11, 16, 2, 1, 3),
    plm.PLMConfig(40, 8, 16, 8, 6, 1, 5),  # the reuse block is all targets
)


def make_rows(rng, cfg, batch, word_start_prob=0.6, pad_prob=0.0):
    """Rows laid out as reuse block + A <sep> B <sep> <cls>, with random word starts.

    With pad_prob > 0 some rows get runs of <pad> (functional), so blocks can have fewer
    eligible tokens than their goal. Returns numpy (ids, is_word_start, is_functional).
    """
    L, R = cfg.seq_len, cfg.reuse_len
    ids = rng.integers(10, 1000, (batch, L)).astype(np.int32)
    is_word_start = rng.random((batch, L)) < word_start_prob
    is_functional = np.zeros((batch, L), bool)
    for b in range(batch):
        a_len = rng.integers(1, L - R - 3)
        is_functional[b, [R + a_len, L - 2, L - 1]] = True  # <sep> after A, <sep>, <cls>
        if rng.random() < pad_prob:
            start = rng.integers(0, L)
            is_functional[b, start : start + rng.integers(1, L)] = True
    is_word_start |= is_functional
    return ids, is_word_start, is_functional


def sample(cfg, seed, ids, ws, func, backward=None):
    if backward is None:
        backward = np.zeros(ids.shape[0], bool)
    return jax.device_get(plm.sample_plm(jax.random.key(seed), ids, ws, func, backward, cfg))


@settings(max_examples=12, deadline=None)
@given(
    cfg=st.sampled_from(CONFIGS),
    seed=st.integers(0, 2**31 - 1),
    word_start_prob=st.sampled_from([0.05, 0.6, 1.0]),
    pad_prob=st.sampled_from([0.0, 0.5]),
)
def test_exact_target_counts(cfg, seed, word_start_prob, pad_prob):
    rng = np.random.default_rng(seed)
    ids, ws, func = make_rows(rng, cfg, BATCH, word_start_prob, pad_prob)
    backward = rng.random(BATCH) < 0.5
    s = sample(cfg, seed, ids, ws, func, backward)
    P = cfg.num_predict
    assert s.target_pos.shape == s.target_ids.shape == s.target_weights.shape == (BATCH, P)
    assert not np.any(s.is_target & func), "a functional token became a target"
    for b in range(BATCH):
        expected = 0
        for start, end, goal in plm.target_blocks(cfg):
            eligible = int(np.sum(~func[b, start:end]))
            got = int(np.sum(s.is_target[b, start:end]))
            assert got == min(goal, eligible), (b, start, got, goal, eligible)
            expected += min(goal, eligible)
        real = int(s.target_weights[b].sum())
        assert real == expected == s.is_target[b].sum()
        # Real targets first (ascending positions), then weight-0 padding pointing at 0.
        np.testing.assert_array_equal(s.target_weights[b], np.arange(P) < real)
        np.testing.assert_array_equal(s.target_pos[b, :real], np.flatnonzero(s.is_target[b]))
        np.testing.assert_array_equal(s.target_ids[b, :real], ids[b, s.target_pos[b, :real]])
        assert np.all(s.target_pos[b, real:] == 0) and np.all(s.target_ids[b, real:] == 0)


def test_padding_only_where_too_few_eligible():
    cfg = CONFIGS[0]
    rng = np.random.default_rng(1)
    ids, ws, func = make_rows(rng, cfg, BATCH)
    func[1, 2:] = True  # Row 1: only two eligible reuse tokens and none in the new block.
    s = sample(cfg, 3, ids, ws, func)
    assert s.target_weights.sum(1).tolist() == [
        cfg.num_predict,
        2,
        cfg.num_predict,
        cfg.num_predict,
    ]
    func[:] = True  # No eligible token at all: nothing hangs, all padding.
    s = sample(cfg, 3, ids, ws, func)
    assert s.target_weights.sum() == 0 and not s.is_target.any()


@pytest.mark.parametrize("cfg", CONFIGS)
def test_target_fraction_is_one_over_k(cfg):
    ids, ws, func = make_rows(np.random.default_rng(2), cfg, BATCH)
    s = sample(cfg, 4, ids, ws, func)
    k = cfg.seq_len / cfg.num_predict
    assert s.is_target.mean() == pytest.approx(1 / k, abs=1e-9)


def draw_spans(n_rows, block_len, goal, word_start_prob, seed, max_span=5, alpha=6, beta=1):
    """Runs the span phase on n_rows random blocks without functional tokens."""
    rng = np.random.default_rng(seed)
    ws = rng.random((n_rows, block_len)) < word_start_prob
    func = np.zeros_like(ws)
    n_words = span_sampler.num_random_words(block_len, goal, max_span, alpha, beta) - block_len
    words = jax.random.bits(jax.random.key(seed), (n_rows, n_words), jnp.uint32)
    spans = jax.jit(
        jax.vmap(lambda r, w, f: span_sampler.sample_spans(r, w, f, goal, max_span, alpha, beta))
    )
    in_span, draws = jax.device_get(spans(words, ws, func))
    return ws, in_span, draws


SPAN_GOAL = 85


@pytest.fixture(scope="module")
def many_spans():
    """600 blocks of 512 pieces, ~40% of pieces continue a word: about 14k spans."""
    return draw_spans(600, 512, SPAN_GOAL, 0.6, seed=5)


def test_span_lengths_follow_inverse_n(many_spans):
    _, _, d = many_spans
    words = d.num_words[d.valid]
    assert words.size >= 10_000
    p = 1.0 / np.arange(1, 6)
    p /= p.sum()
    hist = np.bincount(words, minlength=6)[1:] / words.size
    np.testing.assert_allclose(hist, p, atol=0.02)
    drawn = np.bincount(d.drawn_len[d.valid], minlength=6)[1:] / words.size
    np.testing.assert_allclose(drawn, p, atol=0.02)


def test_spans_cover_whole_words_and_are_cut_only_at_goal_or_block_end(many_spans):
    ws, in_span, d = many_spans
    n_tok, goal = ws.shape[1], SPAN_GOAL
    for row in range(ws.shape[0]):
        boundary = np.append(ws[row], True)  # the block end counts as a boundary
        count = 0
        covered = np.zeros(n_tok, bool)
        for s in np.flatnonzero(d.valid[row]):
            beg, end, words = d.begin[row, s], d.end[row, s], d.num_words[row, s]
            assert ws[row, beg] and boundary[end], "span not aligned to words"
            assert words == boundary[beg:end].sum()
            assert not covered[beg:end].any(), "spans overlap"
            covered[beg:end] = True
            remaining = goal - count
            if words < d.drawn_len[row, s]:  # a cut: by the goal or by the block end
                next_end = np.flatnonzero(boundary[end + 1 :])
                assert (
                    end == n_tok
                    or d.drawn_len[row, s] > remaining
                    or (end + 1 + next_end[0] - beg > remaining)
                )
            count += end - beg
        assert count <= goal
        np.testing.assert_array_equal(covered, in_span[row])


def test_span_phase_fraction_is_beta_over_alpha_plus_beta():
    # Every piece a word start and an unreachable goal: spans + contexts tile the block.
    _, in_span, _ = draw_spans(200, 512, 512, 1.0, seed=7)
    assert in_span.mean() == pytest.approx(1 / 7, abs=0.01)


def test_spans_never_contain_functional_tokens():
    rng = np.random.default_rng(8)
    ws = rng.random((100, 128)) < 0.5
    func = rng.random((100, 128)) < 0.1
    ws |= func
    words = jax.random.bits(
        jax.random.key(8), (100, span_sampler.num_random_words(128, 30, 5, 2, 1)), jnp.uint32
    )
    sample = jax.vmap(lambda r, w, f: span_sampler.sample_block_targets(r, w, f, 30, 5, 2, 1))
    spans = jax.jit(sample)
    chosen, d = jax.device_get(spans(words, ws, func))
    assert not np.any(chosen & func)
    for row, s in zip(*np.nonzero(d.valid), strict=True):
        assert not func[row, d.begin[row, s] : d.end[row, s]].any()
    np.testing.assert_array_equal(chosen.sum(1), np.minimum(30, (~func).sum(1)))


def test_backward_rows_are_sampled_in_forward_order():
    cfg = CONFIGS[2]
    ids, ws, func = make_rows(np.random.default_rng(9), cfg, BATCH)
    blocks = plm.target_blocks(cfg)

    def flip_blocks(x):
        return np.concatenate([x[:, s:e][:, ::-1] for s, e, _ in blocks], axis=1)

    fwd = sample(cfg, 10, ids, ws, func, np.zeros(BATCH, bool))
    bwd = sample(
        cfg, 10, flip_blocks(ids), flip_blocks(ws), flip_blocks(func), np.ones(BATCH, bool)
    )
    np.testing.assert_array_equal(bwd.is_target, flip_blocks(fwd.is_target))


def test_local_ranks_share_one_permutation_per_block_independent_across_blocks():
    """Within a block the perm_size sub-blocks share one permutation; the reuse block and the
    new block draw their own (the original calls `_local_perm` once per block)."""
    cfg = plm.PLMConfig(64, 16, 5, 16, 6, 1, 5)  # reuse: 1 sub-block; new: 3 sub-blocks
    words = jax.random.bits(jax.random.key(0), (plm._num_order_words(cfg),), jnp.uint32)
    blocks = np.asarray(plm._local_ranks(words, cfg)).reshape(4, 16)
    for i, block in enumerate(blocks):
        assert sorted(block) == list(range(16 * i, 16 * (i + 1)))
    relative = blocks - 16 * np.arange(4)[:, None]
    np.testing.assert_array_equal(relative[1:], np.broadcast_to(relative[1], (3, 16)))
    assert not np.array_equal(relative[0], relative[1])


@pytest.mark.parametrize(
    "cfg",
    [
        plm.PLMConfig(512, 256, 85, 256, 6, 1, 5),  # the published shape
        plm.PLMConfig(45, 9, 11, 9, 2, 1, 3),  # odd sizes: the new block holds 4 sub-blocks
    ],
)
def test_reuse_and_new_block_orders_are_independent(cfg):
    """Over 1,024 sampled rows, the relative rank at one offset agrees between the reuse and
    the new block about 1/perm_size of the time (the same shuffle would agree always), and
    always between sub-blocks of the new block."""
    ids, ws, func = make_rows(np.random.default_rng(3), cfg, 1024)
    s = sample(cfg, 4, ids, ws, func)
    ordered = (s.ranks >= 0).reshape(1024, -1, cfg.perm_size)
    relative = s.ranks.reshape(1024, -1, cfg.perm_size) % cfg.perm_size
    reuse_subs = cfg.reuse_len // cfg.perm_size
    both = ordered[:, 0] & ordered[:, reuse_subs]
    across = relative[:, 0][both] == relative[:, reuse_subs][both]
    assert both.sum() >= 1000
    assert across.mean() <= 3 / cfg.perm_size + 0.02, across.mean()
    for sub in range(reuse_subs + 1, relative.shape[1]):
        both = ordered[:, reuse_subs] & ordered[:, sub]
        assert (relative[:, reuse_subs][both] == relative[:, sub][both]).all()


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[1]])
def test_ranks(cfg):
    ids, ws, func = make_rows(np.random.default_rng(11), cfg, BATCH)
    s = sample(cfg, 12, ids, ws, func)
    ordered = s.is_target | func
    np.testing.assert_array_equal(s.ranks == -1, ~ordered)
    for b in range(BATCH):
        r = s.ranks[b][ordered[b]]
        assert len(set(r)) == len(r) and r.min() >= 0 and r.max() < cfg.seq_len
        if cfg.reuse_len:
            reuse = s.ranks[b, : cfg.reuse_len][ordered[b, : cfg.reuse_len]]
            new = s.ranks[b, cfg.reuse_len :][ordered[b, cfg.reuse_len :]]
            assert reuse.max() < new.min()


def slow_perm_mask(ranks, is_target, is_functional, reuse_len):
    """The reference formula, one (i, j) at a time."""
    B, L = ranks.shape
    out = np.zeros((B, L, L), bool)
    for b in range(B):
        for i in range(L):
            self_rank = ranks[b, i] if is_target[b, i] else ranks[b, i] + 1
            for j in range(L):
                ordered_j = is_target[b, j] or is_functional[b, j]
                later = self_rank <= ranks[b, j] and ordered_j
                if i < reuse_len <= j:  # the reuse block never sees the new block
                    out[b, i, j] = True
                elif j < reuse_len <= i:  # the new block sees the whole reuse block
                    out[b, i, j] = False
                else:
                    out[b, i, j] = later
    return out


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[1]])
def test_perm_mask_matches_slow_reference(cfg):
    ids, ws, func = make_rows(np.random.default_rng(13), cfg, BATCH, pad_prob=0.5)
    s = sample(cfg, 14, ids, ws, func)
    got = np.asarray(plm.perm_mask(s, func, cfg.reuse_len))
    np.testing.assert_array_equal(got, slow_perm_mask(s.ranks, s.is_target, func, cfg.reuse_len))
    # Random ranks too, not only those the sampler makes.
    rng = np.random.default_rng(15)
    ranks = np.where(rng.random(ids.shape) < 0.5, rng.integers(0, cfg.seq_len, ids.shape), -1)
    s = s._replace(ranks=ranks.astype(np.int32), is_target=(ranks >= 0) & ~func)
    got = np.asarray(plm.perm_mask(s, func, cfg.reuse_len))
    np.testing.assert_array_equal(got, slow_perm_mask(ranks, s.is_target, func, cfg.reuse_len))


def test_targets_never_see_themselves():
    cfg = CONFIGS[0]
    ids, ws, func = make_rows(np.random.default_rng(16), cfg, BATCH)
    s = sample(cfg, 17, ids, ws, func)
    mask = np.asarray(plm.perm_mask(s, func, cfg.reuse_len))
    diag = np.diagonal(mask, axis1=1, axis2=2)
    np.testing.assert_array_equal(diag, s.is_target)


def test_deterministic_per_key():
    cfg = CONFIGS[0]
    ids, ws, func = make_rows(np.random.default_rng(18), cfg, BATCH)
    a, b, c = (sample(cfg, seed, ids, ws, func) for seed in (1, 1, 2))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.ranks, c.ranks)
    assert not np.array_equal(a.is_target, c.is_target)
    assert not np.array_equal(a.is_target[0], a.is_target[1]), "rows share a key"


def test_from_config():
    from xlnet_jax import config

    cfg = plm.PLMConfig.from_config(config.default_config())
    assert cfg == plm.PLMConfig(128, 64, 21, 64, 6, 1, 5)
    plm.validate_plm_config(cfg)


GOOD = plm.PLMConfig(512, 256, 85, 256, 6, 1, 5)


@pytest.mark.parametrize(
    "field,changes",
    [
        ("num_predict", dict(num_predict=0)),
        ("num_predict", dict(num_predict=600)),
        ("num_predict", dict(reuse_len=0, num_predict=510, perm_size=512)),
        ("num_predict", dict(reuse_len=480, perm_size=32, num_predict=60)),  # new block: 29
        ("perm_size", dict(perm_size=100)),
        ("perm_size", dict(perm_size=0)),
        ("perm_size", dict(reuse_len=128, perm_size=256)),
        ("perm_size", dict(reuse_len=0, perm_size=384)),
        ("reuse_len", dict(reuse_len=512)),
        ("reuse_len", dict(reuse_len=-1)),
        ("max_span", dict(max_span=0)),
        ("mask_alpha", dict(mask_alpha=0)),
        ("mask_beta", dict(mask_beta=-1)),
        ("seq_len", dict(seq_len=3, reuse_len=0, num_predict=1, perm_size=1)),
    ],
)
def test_validation_names_the_field(field, changes):
    with pytest.raises(ValueError, match=f"^{field}:"):
        plm.validate_plm_config(dataclasses.replace(GOOD, **changes))


def test_same_sample_when_the_batch_is_sharded():
    # An Auto-axes mesh, as sharding.make_mesh builds (Explicit axes are not supported).
    cfg = CONFIGS[0]
    ids, ws, func = make_rows(np.random.default_rng(20), cfg, 8)
    backward = np.arange(8) % 2 == 1
    mesh = jax.make_mesh((8,), ("data",), (jax.sharding.AxisType.Auto,))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    sharded = jax.device_put((ids, ws, func, backward), rows)
    with jax.set_mesh(mesh):
        a = plm.sample_plm(jax.random.key(21), *sharded, cfg)
        mask = plm.perm_mask(a, sharded[2], cfg.reuse_len)
    b = sample(cfg, 21, ids, ws, func, backward)
    assert a.ranks.sharding.spec[0] == "data"
    for x, y in zip(jax.device_get(a), b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert mask.sharding.spec[0] == "data"
    np.testing.assert_array_equal(mask, plm.perm_mask(b, func, cfg.reuse_len))
