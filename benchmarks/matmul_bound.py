"""The float32 matmuls of one train step, timed in XLA and in torch: the floor under our step.

Enumerates the matmuls one training step does (the forward that xlnet_jax/model/flops.py counts,
and for every forward Y = X W the backward dX = dY Wᵀ and dW = Xᵀ dY), checks that their
FLOPs add up to flops.train_flops_per_step, and times every distinct shape with contiguous
float32 operands in XLA (jax.jit of jnp.matmul, block_until_ready) and then in torch
(torch.matmul), each the median of --iters calls after two warm-up calls. The sum
of count x time is the step's matmul time with ideal layouts: no step built on that dot can
be faster. --step also times both whole steps (ours and HF's, alternating, as
train_throughput.py) and prints the matmuls' share of each.

  python benchmarks/matmul_bound.py                          # small,bench
  python benchmarks/matmul_bound.py --shapes small,bench --step   # ~6 min
"""

import argparse
import os
import statistics
from typing import NamedTuple

# As train_throughput.py: spin-waiting OpenMP threads stall on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from harness import SHAPES, describe, machine, make_trainer, shape_config, time_calls  # noqa: E402

from xlnet_jax.model import flops  # noqa: E402


class Matmul(NamedTuple):
    """`count` matmuls per step of `batch` independent [m, k] x [k, n] products."""

    name: str
    count: int
    batch: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        """FLOPs of one call (a multiply-add is 2)."""
        return 2 * self.batch * self.m * self.k * self.n

    @property
    def shape(self) -> str:
        """'[m,k]·[k,n]', prefixed by the batch when there is one."""
        prefix = f"{self.batch}x" if self.batch > 1 else ""
        return f"{prefix}[{self.m},{self.k}]·[{self.k},{self.n}]"


def forward_matmuls(c: ml_collections.ConfigDict) -> list[Matmul]:
    """The forward matmuls of one step as flops.py counts them (segment term left out);
    h is the content stream over seq_len rows, g the query stream over num_predict rows."""
    keys = c.mem_len + c.seq_len
    positions = keys + c.seq_len
    heads, d_head, width = c.batch_size * c.n_head, c.d_head, c.n_head * c.d_head
    layers = c.n_layer
    out = []
    for stream, rows in (("h", c.seq_len), ("g", c.num_predict)):
        tokens = c.batch_size * rows
        out += [
            Matmul(f"{stream} q projection", layers, 1, tokens, c.d_model, width),
            Matmul(f"{stream} output projection", layers, 1, tokens, width, c.d_model),
            Matmul(f"{stream} FFN in", layers, 1, tokens, c.d_model, c.d_inner),
            Matmul(f"{stream} FFN out", layers, 1, tokens, c.d_inner, c.d_model),
            Matmul(f"{stream} content term", layers, heads, rows, d_head, keys),
            Matmul(f"{stream} position term", layers, heads, rows, d_head, positions),
            Matmul(f"{stream} values", layers, heads, rows, keys, d_head),
        ]
    return out + [
        Matmul("k, v projections", 2 * layers, 1, c.batch_size * keys, c.d_model, width),
        Matmul("relative position projection", layers, 1, positions, c.d_model, width),
        Matmul("LM head", 1, 1, c.batch_size * c.num_predict, c.d_model, c.vocab_size),
    ]


def step_matmuls(c: ml_collections.ConfigDict) -> list[Matmul]:
    """Forward, dX = dY Wᵀ ([m,n]·[n,k]) and dW = Xᵀ dY ([k,m]·[m,n]) of every forward."""
    out = []
    for f in forward_matmuls(c):
        out += [
            f._replace(name=f"{f.name} fwd"),
            f._replace(name=f"{f.name} dX", k=f.n, n=f.k),
            f._replace(name=f"{f.name} dW", m=f.k, k=f.m),
        ]
    return out


def distinct(matmuls: list[Matmul]) -> list[Matmul]:
    """One Matmul per distinct shape: names joined, counts summed, in order of appearance."""
    merged: dict[tuple[int, int, int, int], Matmul] = {}
    for mm in matmuls:
        key = (mm.batch, mm.m, mm.k, mm.n)
        if key in merged:
            old = merged[key]
            mm = old._replace(name=f"{old.name}; {mm.name}", count=old.count + mm.count)
        merged[key] = mm
    return list(merged.values())


def time_matmul(mm: Matmul, iters: int) -> tuple[float, float]:
    """Median seconds of one call in XLA and in torch, on the same contiguous operands."""
    rng = np.random.default_rng(0)
    lead = (mm.batch,) if mm.batch > 1 else ()
    a = rng.standard_normal((*lead, mm.m, mm.k), np.float32)
    b = rng.standard_normal((*lead, mm.k, mm.n), np.float32)
    dot = jax.jit(jnp.matmul)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    xla = time_calls(lambda: dot(ja, jb).block_until_ready(), iters)
    tor = time_calls(lambda: torch.matmul(ta, tb), iters)
    return statistics.median(xla), statistics.median(tor)


def time_steps(c: ml_collections.ConfigDict, iters: int) -> tuple[float, float]:
    """Median seconds of our train step and HF's, alternating (as train_throughput.py)."""
    from train_throughput import HFTrainer, alternate

    ours = make_trainer(c)
    params = jax.device_get(ours.state.params)
    theirs = HFTrainer(c, params, ours.host_batch, ours.state.rng, iters + 2)
    ours_t, hf_t = alternate(ours.run, theirs.run, iters)
    return statistics.median(ours_t), statistics.median(hf_t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,bench", help=f"from {sorted(SHAPES)}")
    parser.add_argument("--iters", type=int, default=10, help="timed calls per matmul shape")
    parser.add_argument("--step", action="store_true", help="also time both whole steps")
    parser.add_argument("--step_iters", type=int, default=10, help="timed steps per framework")
    args = parser.parse_args()
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    wait = os.environ["OMP_WAIT_POLICY"]
    print(f"machine: {machine()}; torch {torch.__version__} ({threads} threads, OMP {wait})")
    print(f"median of {args.iters} calls per shape after 2 warm-up calls; float32, contiguous\n")
    summary = []
    for name in args.shapes.split(","):
        c = shape_config(name)
        matmuls = distinct(step_matmuls(c))
        total = sum(mm.count * mm.flops for mm in matmuls)
        ratio = total / flops.train_flops_per_step(c)
        assert abs(ratio - 1) < 0.02, f"{name}: matmuls {ratio:.4f} x flops.py"
        print(f"{name}: {describe(c)}; {total / 1e9:.2f} GFLOP/step = {ratio:.4f} x flops.py\n")
        print("| matmul | shape | count | XLA ms | torch ms | XLA GFLOP/s | torch GFLOP/s |")
        print("|---|---|---|---|---|---|---|")
        xla_sum = torch_sum = 0.0
        for mm in matmuls:
            xla, tor = time_matmul(mm, args.iters)
            xla_sum += mm.count * xla
            torch_sum += mm.count * tor
            print(
                f"| {mm.name} | {mm.shape} | {mm.count} | {1e3 * xla:.2f} | {1e3 * tor:.2f} | "
                f"{mm.flops / xla / 1e9:.1f} | {mm.flops / tor / 1e9:.1f} |"
            )
        steps = time_steps(c, args.step_iters) if args.step else None
        summary.append((name, total, xla_sum, torch_sum, steps))
        print()
    print("matmul time per step (ideal layouts): sum of count x median over the shapes above")
    print("\n| shape | GFLOP/step | XLA ms | torch ms | XLA/torch |")
    print("|---|---|---|---|---|")
    for name, total, xla_sum, torch_sum, _ in summary:
        print(
            f"| {name} | {total / 1e9:.2f} | {1e3 * xla_sum:.0f} | {1e3 * torch_sum:.0f} | "
            f"{xla_sum / torch_sum:.2f} |"
        )
    if args.step:
        print(f"\nwhole train step: median of {args.step_iters} alternating steps\n")
        print("| shape | framework | step ms | matmul ms | matmul share |")
        print("|---|---|---|---|---|")
        for name, _, xla_sum, torch_sum, (ours_s, hf_s) in summary:
            for label, step_s, mm_s in (("xlnet-jax", ours_s, xla_sum), ("HF", hf_s, torch_sum)):
                print(
                    f"| {name} | {label} | {1e3 * step_s:.0f} | {1e3 * mm_s:.0f} | "
                    f"{100 * mm_s / step_s:.0f}% |"
                )
        print("\nbest speedup over HF that XLA's dot allows (HF step / XLA matmul time per step):")
        print(
            ", ".join(f"{name} {steps[1] / xla_sum:.2f}x" for name, _, xla_sum, _, steps in summary)
        )
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
