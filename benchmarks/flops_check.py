"""Checks the analytic model FLOPs (xlnet_jax/model/flops.py) against XLA's own count.

For each shape at one layer (cost analysis counts a loop body once, so deeper scans would
be undercounted), lowers the deterministic forward pass and compares XLA's
`lowered.cost_analysis()["flops"]` (every op: matmuls, softmax, LayerNorm, GELU, ...) with
flops.forward_flops_per_row * batch (matmuls only): XLA's count should be a few percent
higher. The lowered (unoptimised) module is analysed because the compiled CPU program hands
its matmuls to YNNPACK custom calls, which the compiled cost analysis does not count.

  python benchmarks/flops_check.py [--shapes small,bench,base]
"""

import argparse

import jax
import jax.numpy as jnp
from harness import SHAPES, shape_config, synthetic_batch

from xlnet_jax.config import ModelConfig
from xlnet_jax.model import flops
from xlnet_jax.model.xlnet import XLNetLM


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,bench,base", help=f"from {sorted(SHAPES)}")
    args = parser.parse_args()
    print("| shape | layers | flops.py forward GFLOP | XLA cost_analysis GFLOP | XLA / ours |")
    print("|---|---|---|---|---|")
    for name in args.shapes.split(","):
        config = shape_config(name, n_layer=1)
        ours = flops.forward_flops_per_row(config) * config.batch_size
        xla = xla_forward_flops(config)
        print(f"| {name} | 1 | {ours / 1e9:.3f} | {xla / 1e9:.3f} | {xla / ours:.3f} |")


if __name__ == "__main__":
    main()
