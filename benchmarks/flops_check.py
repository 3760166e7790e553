"""Checks the analytic model FLOPs (xlnet_jax/model/flops.py) against XLA's own count.

For each shape at one layer (cost analysis counts a loop body once, so deeper scans would
be undercounted), lowers the deterministic forward pass and compares XLA's
`lowered.cost_analysis()["flops"]` (every op: matmuls, softmax, LayerNorm, GELU, ...) with
flops.forward_flops_per_row * batch (matmuls only): XLA's count should be a few percent
higher. The lowered (unoptimised) module is analysed because the compiled CPU program hands
its matmuls to YNNPACK custom calls, which the compiled cost analysis does not count.

With --kernel_topology, it instead AOT-compiles a preset's whole train step for that TPU
topology (libtpu, from this CPU) through the XLA attention path and through the Pallas kernel,
and compares XLA's FLOP counts of the two: the kernel's Mosaic calls declare their cost
(model/kernels/cost.py), so the counts should agree within a few percent. The scanned layer
body is counted once on both paths alike. --batch_size keeps the compile small (a step that
does not fit the chip spends long in XLA's memory passes before it fails); it scales both
counts alike.

  python benchmarks/flops_check.py [--shapes small,bench,base]
  python benchmarks/flops_check.py --kernel_topology v5e:2x2 --config base --batch_size 32
"""

import argparse
import os
import runpy
import time

import jax
import jax.numpy as jnp
from harness import SHAPES, shape_config, synthetic_batch

from xlnet_jax.config import ModelConfig
from xlnet_jax.model import flops
from xlnet_jax.model.xlnet import XLNetLM
from xlnet_jax.training import aot

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def xla_forward_flops(config) -> float:
    """XLA's cost_analysis FLOPs of one deterministic forward pass (random masks)."""
    model = XLNetLM(ModelConfig.from_config(config))
    batch = synthetic_batch(config)
    length, rows = config.seq_len, config.batch_size
    args = (
        jnp.asarray(batch["input_ids"]),
        jnp.asarray(batch["seg_ids"]),
        jnp.zeros((rows, length, length), bool),
        jnp.zeros((rows, config.num_predict), jnp.int32),
        jnp.zeros((config.n_layer, rows, config.mem_len, config.d_model)),
    )
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), *args, deterministic=True))
    forward = jax.jit(lambda p: model.apply(p, *args, deterministic=True))
    return forward.lower(params).cost_analysis()["flops"]


def train_step_flops(preset: str, topology: str, batch_size: int, impl: str) -> float:
    """XLA's FLOPs per step per device of `preset`'s train step compiled for `topology`."""
    config = runpy.run_path(os.path.join(CONFIGS, f"{preset}.py"))["get_config"]()
    config.update(batch_size=batch_size, attention_impl=impl)
    report, compiled = aot.compile_train_step(config, topology)
    if compiled is None:
        raise SystemExit(f"{preset} at batch_size {batch_size} does not fit {topology}")
    return report.xla_flops


def kernel_cost_table(preset: str, topology: str, batch_size: int) -> None:
    """Prints XLA's FLOP count of the step on both attention paths, and their ratio."""
    print(f"| {preset} train step on {topology}, batch_size {batch_size} | XLA FLOPs per step "
          "per device | compile s |")  # fmt: skip
    print("|---|---|---|")
    counts = {}
    for impl in ("xla", "pallas"):
        start = time.perf_counter()
        counts[impl] = train_step_flops(preset, topology, batch_size, impl)
        print(f"| attention_impl={impl} | {counts[impl]:.4e} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)  # fmt: skip
    print(f"kernel / XLA path: {counts['pallas'] / counts['xla']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,bench,base", help=f"from {sorted(SHAPES)}")
    parser.add_argument("--kernel_topology", help="a TPU topology: compare the step's paths")
    parser.add_argument("--config", default="base", help="a preset in configs/")
    parser.add_argument("--batch_size", type=int, default=32, help="global, for the step")
    args = parser.parse_args()
    if args.kernel_topology:
        kernel_cost_table(args.config, args.kernel_topology, args.batch_size)
        return
    print("| shape | layers | flops.py forward GFLOP | XLA cost_analysis GFLOP | XLA / ours |")
    print("|---|---|---|---|---|")
    for name in args.shapes.split(","):
        config = shape_config(name, n_layer=1)
        ours = flops.forward_flops_per_row(config) * config.batch_size
        xla = xla_forward_flops(config)
        print(f"| {name} | 1 | {ours / 1e9:.3f} | {xla / 1e9:.3f} | {xla / ours:.3f} |")


if __name__ == "__main__":
    main()
