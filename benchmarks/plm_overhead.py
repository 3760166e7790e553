"""What the permutation-LM objective costs inside the step, next to the model's forward pass.

Times, on the default jax device, (a) `sample_plm` + `perm_mask` (what the train step adds
to build a batch's targets, order and [B, L, L] mask from O(B·L) inputs) and (b) one
deterministic forward pass of a base-width XLNetLM at the same shape, and prints a table.

  python benchmarks/plm_overhead.py                   # seq 512, batch 8, base width
  python benchmarks/plm_overhead.py --n_layer 2 --iters 3   # quicker on a CPU
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from xlnet_jax.config import ModelConfig
from xlnet_jax.model.xlnet import XLNetLM
from xlnet_jax.objective import plm


def make_rows(rng: np.random.Generator, cfg: plm.PLMConfig, batch: int):
    """Rows reuse + A <sep> B <sep> <cls>: ids, is_word_start, is_functional, seg_ids."""
    L, R = cfg.seq_len, cfg.reuse_len
    ids = rng.integers(10, 32000, (batch, L)).astype(np.int32)
    is_word_start = rng.random((batch, L)) < 0.6
    is_functional = np.zeros((batch, L), bool)
    seg_ids = np.zeros((batch, L), np.int32)
    for b in range(batch):
        sep_a = R + rng.integers(1, L - R - 3)
        is_functional[b, [sep_a, L - 2, L - 1]] = True
        seg_ids[b, sep_a + 1 : L - 1] = 1
        seg_ids[b, L - 1] = 2
    return ids, is_word_start | is_functional, is_functional, seg_ids


def time_ms(fn, *args, iters: int) -> tuple[float, float]:
    """(first call incl. compile, median of `iters` later calls), in milliseconds."""
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = (time.perf_counter() - start) * 1e3
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append((time.perf_counter() - start) * 1e3)
    return first, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--reuse_len", type=int, default=256)
    parser.add_argument("--num_predict", type=int, default=85)
    parser.add_argument("--perm_size", type=int, default=256)
    parser.add_argument("--mem_len", type=int, default=384)
    parser.add_argument("--d_model", type=int, default=768)
    parser.add_argument("--n_layer", type=int, default=12)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()

    cfg = plm.PLMConfig(args.seq_len, args.reuse_len, args.num_predict, args.perm_size, 6, 1, 5)
    ids, ws, func, seg = make_rows(np.random.default_rng(0), cfg, args.batch)
    backward = np.arange(args.batch) >= args.batch // 2
    ids, ws, func, seg, backward = jax.device_put((ids, ws, func, seg, backward))

    @jax.jit
    def sample_and_mask(key):
        sample = plm.sample_plm(key, ids, ws, func, backward, cfg)
        return sample, plm.perm_mask(sample, func, cfg.reuse_len)

    sample_only = jax.jit(lambda key: plm.sample_plm(key, ids, ws, func, backward, cfg))
    mask_only = jax.jit(lambda s: plm.perm_mask(s, func, cfg.reuse_len))
    key = jax.random.key(0)
    cheap_iters = 20 * args.iters
    objective_rows = [
        ("sample_plm + perm_mask", *time_ms(sample_and_mask, key, iters=cheap_iters)),
        ("sample_plm", *time_ms(sample_only, key, iters=cheap_iters)),
    ]
    sample, mask = sample_and_mask(key)
    objective_rows.append(("perm_mask", *time_ms(mask_only, sample, iters=cheap_iters)))

    n_head = args.d_model // 64
    model_cfg = ModelConfig(
        vocab_size=32000,
        d_model=args.d_model,
        n_layer=args.n_layer,
        n_head=n_head,
        d_head=64,
        d_inner=4 * args.d_model,
        dropout=0.0,
        dropatt=0.0,
        reuse_len=args.reuse_len,
        mem_len=args.mem_len,
    )
    model = XLNetLM(model_cfg)
    mems = jnp.zeros((args.n_layer, args.batch, args.mem_len, args.d_model))
    params = jax.jit(
        lambda k: model.init(k, ids, seg, mask, sample.target_pos, mems, deterministic=True)
    )(jax.random.key(1))
    forward = jax.jit(lambda p, m, t: model.apply(p, ids, seg, m, t, mems, deterministic=True)[0])

    forward_row = (
        f"XLNetLM forward ({args.n_layer}x{args.d_model})",
        *time_ms(forward, params, mask, sample.target_pos, iters=args.iters),
    )
    rows = [*objective_rows, forward_row]
    print(
        f"device: {jax.devices()[0].device_kind}; batch {args.batch}, seq {args.seq_len}, "
        f"reuse {args.reuse_len}, num_predict {args.num_predict}, perm {args.perm_size}, "
        f"mem {args.mem_len}; median of {cheap_iters} (objective) / {args.iters} (forward) calls"
    )
    print(f"| {'what':<34} | {'first call ms':>13} | {'median ms':>10} |")
    print(f"|{'-' * 36}|{'-' * 15}|{'-' * 12}|")
    for name, first, median in rows:
        print(f"| {name:<34} | {first:>13.1f} | {median:>10.2f} |")
    overhead = objective_rows[0][2] / forward_row[2]
    print(f"objective / forward: {100 * overhead:.2f}%")


if __name__ == "__main__":
    main()
