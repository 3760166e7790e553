"""Shared pieces of the CPU benchmarks: named shapes, our compiled train step, timing, peak.

Every benchmark times the real training step, built by `program.build_program` as the loop
builds it (state donated, traced under the mesh and its logical axis rules), on a synthetic
batch laid out as the stream batcher lays rows out (reuse block, A <sep> B <sep> <cls>).
"""

import dataclasses
import importlib.util
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # CPU benchmarks (a libtpu install is ignored)

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402

from xlnet_jax.config import ModelConfig  # noqa: E402
from xlnet_jax.model.xlnet import XLNetLM  # noqa: E402
from xlnet_jax.training import sharding  # noqa: E402
from xlnet_jax.training.program import build_program  # noqa: E402

SEP, CLS = 4, 3
CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# Shape name -> (preset, overrides). All float32, no bi_data, no dropout: the same work for
# HF, whose single dropout cannot be split into hidden and attention parts.
SHAPES = {
    "toy": ("tiny", dict(n_layer=2, d_model=64, n_head=2, d_head=32, d_inner=128, seq_len=32,
                         reuse_len=16, mem_len=16, perm_size=16, num_predict=6, batch_size=4,
                         vocab_size=256)),
    "tiny": ("tiny", {}),
    "small": ("tiny", dict(vocab_size=8000, d_model=256, n_layer=4, n_head=4, d_head=64,
                           d_inner=1024, seq_len=128, reuse_len=64, mem_len=96, perm_size=64,
                           num_predict=21, mask_alpha=6, batch_size=16, scan_unroll=1)),
    "bench": ("tiny", dict(n_layer=6, d_model=512, n_head=8, d_head=64, d_inner=2048,
                           seq_len=256, reuse_len=128, mem_len=128, perm_size=128,
                           num_predict=43, batch_size=8, vocab_size=32000, mask_alpha=6,
                           scan_unroll=1)),
    "base": ("base", dict(seq_len=512, mem_len=384, reuse_len=256, num_predict=85,
                          batch_size=2, bi_data=False, dtype="float32", remat=False)),
    "large": ("large", dict(seq_len=512, mem_len=384, reuse_len=256, num_predict=85,
                            batch_size=2, bi_data=False, dtype="float32", remat=False)),
}  # fmt: skip


def shape_config(name: str, **overrides) -> ml_collections.ConfigDict:
    """The config of a named shape (see SHAPES), with further overrides."""
    preset, changes = SHAPES[name]
    spec = importlib.util.spec_from_file_location(preset, os.path.join(CONFIGS, f"{preset}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    for key, value in {"dropout": 0.0, "dropatt": 0.0, **changes, **overrides}.items():
        config[key] = value
    return config


def describe(c: ml_collections.ConfigDict) -> str:
    """One line: layers x width, heads, sequence layout and batch."""
    return (
        f"{c.n_layer}x{c.d_model}, {c.n_head} heads, ffn {c.d_inner}, vocab {c.vocab_size}; "
        f"seq {c.seq_len}, mem {c.mem_len}, reuse {c.reuse_len}, predict {c.num_predict}, "
        f"batch {c.batch_size}" + (", remat" if c.remat else "")
    )


def synthetic_batch(c: ml_collections.ConfigDict, seed: int = 0) -> dict[str, np.ndarray]:
    """A host batch with the stream layout: reuse + A <sep> B <sep> <cls>, random pieces."""
    rng = np.random.default_rng(seed)
    rows, length = c.batch_size, c.seq_len
    ids = rng.integers(9, c.vocab_size, (rows, length)).astype(np.int32)
    cut = rng.integers(c.reuse_len + 1, length - 3, rows)
    j = np.arange(length)
    ids[j[None] == cut[:, None]] = SEP
    ids[:, -2], ids[:, -1] = SEP, CLS
    seg = (j[None] > cut[:, None]).astype(np.int32)
    seg[:, -1] = 2
    return {
        "input_ids": ids,
        "seg_ids": seg,
        "is_word_start": rng.random((rows, length)) < 0.7,
        "is_functional": np.isin(ids, [SEP, CLS]),
        "is_backward": np.zeros(rows, bool),
    }


@dataclasses.dataclass
class Trainer:
    """Our compiled train step with its state, and the device batch it runs on."""

    config: ml_collections.ConfigDict
    step: Callable
    state: object
    batch: dict  # on device
    host_batch: dict[str, np.ndarray]
    compile_s: float

    def run(self) -> dict:
        """One step, with host<->device transfers disallowed (the batch is already on device)."""
        with jax.transfer_guard("disallow"):
            self.state, metrics = self.step(self.state, self.batch)
        return jax.block_until_ready(metrics)


def init_params(c: ml_collections.ConfigDict) -> dict:
    """Freshly initialised model parameters of `c`, on the host (no train step compiled)."""
    model = XLNetLM(ModelConfig.from_config(c))
    batch = synthetic_batch(c)
    length, rows = c.seq_len, c.batch_size
    args = (
        batch["input_ids"],
        batch["seg_ids"],
        np.zeros((rows, length, length), bool),
        np.zeros((rows, c.num_predict), np.int32),
        np.zeros((c.n_layer, rows, c.mem_len, c.d_model), np.float32),
    )
    init = jax.jit(lambda key: model.init(key, *args, deterministic=True)["params"])
    return jax.device_get(nn.meta.unbox(init(jax.random.key(c.seed))))


def make_trainer(c: ml_collections.ConfigDict) -> Trainer:
    """Builds state and compiles the program's train step for `c` on all local devices."""
    program = build_program(c, sharding.make_mesh(c))
    with program.activate():
        host_batch = synthetic_batch(c)
        batch = program.put_batch(host_batch)
        start = time.perf_counter()
        step = program.compile_train_step()
        compile_s = time.perf_counter() - start
        return Trainer(c, step, program.init_state(), batch, host_batch, compile_s)


def time_calls(fn: Callable[[], object], iters: int, warmup: int = 2) -> list[float]:
    """Wall seconds of `iters` calls of fn after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def ms(times: list[float]) -> str:
    """'median (min-max)' in milliseconds."""
    return f"{1e3 * statistics.median(times):.0f} ({1e3 * min(times):.0f}-{1e3 * max(times):.0f})"


def matmul_peak_gflops(n: int = 2048, iters: int = 10) -> float:
    """Median float32 GFLOP/s of one n x n x n jnp.dot (XLA's default CPU precision)."""
    a = jnp.ones((n, n), jnp.float32)
    dot = jax.jit(jnp.dot)
    times = time_calls(lambda: dot(a, a).block_until_ready(), iters)
    return 2 * n**3 / statistics.median(times) / 1e9


def machine() -> str:
    """CPU model, cores seen by this process, load average and library versions."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                     if line.startswith("Model name"))  # fmt: skip
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{model}, {len(os.sched_getaffinity(0))} cores; load average {load}; "
        f"jax {jax.__version__} ({jax.devices()[0].platform}, {jax.device_count()} devices)"
    )
