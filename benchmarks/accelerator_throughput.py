"""Train-step throughput on an accelerator: xlnet-jax against HF XLNetLMHeadModel (eager and
torch.compile), the same weights, rows, PLM masks and carried memory.

Our side is the real train step (`program.build_program`, as training builds it) in the
config's compute dtype. HF's side is `train_throughput.HFTrainer`: our weights exported with
hf.py, our step's perm_mask and targets, mems carried between steps, autocast to the same
dtype, fused AdamW and global-norm clipping, eager and under torch.compile.

Each framework runs in its own subprocess, one after the other (back to back, not
alternating): each then has the whole device, its peak memory is its own, and neither can
push the other out of memory. Alternating steps would need both resident at once. MFU is
the analytic model FLOP rate (xlnet_jax/model/flops.py) against the device's datasheet dense bf16
peak (xlnet_jax/hardware/chips.py) and, beside it, against a matmul measured in the same
run.

  python benchmarks/accelerator_throughput.py                       # base,large; batch 16; bf16
  python benchmarks/accelerator_throughput.py --search              # and the largest batch
  python benchmarks/accelerator_throughput.py --breakdown           # device time by category
  python benchmarks/accelerator_throughput.py --kernel --dropatt 0.1  # and our fused kernel
  python benchmarks/accelerator_throughput.py --kernel --hf none --triton_tiles 128,8,3
  JAX_PLATFORMS=cpu python benchmarks/accelerator_throughput.py --shapes toy --batch 4 \\
      --iters 1 --hf eager --dtype float32                         # the CPU smoke test
"""

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

# No platform default: this benchmark runs on whatever JAX finds (harness would pick the CPU).
os.environ.setdefault("JAX_PLATFORMS", "")

HERE = os.path.dirname(os.path.abspath(__file__))
RESULT = "RESULT "  # prefix of a child's one-line JSON result
FRAMEWORKS = {
    "ours": "xlnet-jax",
    "kernel": "xlnet-jax, Pallas kernel",
    "eager": "HF eager",
    "compile": "HF torch.compile",
}
OURS = ("ours", "kernel")  # our step with attention_impl xla / pallas

# Device-time categories of a profile trace, matched in order against op/kernel names.
CATEGORIES = (
    ("collectives", r"all-reduce|all-gather|reduce-scatter|all-to-all|nccl|collective"),
    ("attention kernel", r"pallas|relative_attention|triton|flash|fmha|cudnn"),
    ("matmul", r"gemm|cublas|cutlass|nvjet|xmma|dot|convolution|matmul"),
    ("copies", r"copy|memcpy|memset|transpose|concatenate|dynamic-update-slice|slice|pad"),
    ("reductions", r"reduce"),
    ("elementwise", r"fusion|add|multiply|select|exp|convert"),
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="base,large", help="harness shapes (toy,base,large)")
    parser.add_argument("--batch", type=int, default=16, help="global batch of the first row")
    parser.add_argument("--search", action="store_true", help="also the largest batch that fits")
    parser.add_argument("--dtype", default="bfloat16", help="compute dtype of both frameworks")
    parser.add_argument("--iters", type=int, default=10, help="timed steps per framework")
    parser.add_argument("--hf", default="eager,compile", help="HF modes: eager,compile or none")
    parser.add_argument("--peak_n", type=int, default=8192, help="size of the measured matmul")
    parser.add_argument("--breakdown", action="store_true", help="our device time by category")
    parser.add_argument(
        "--kernel",
        action="store_true",
        help="also our step with attention_impl=pallas (TPU: Mosaic, NVIDIA GPU: Triton; "
        "interpreted, slowly, on a CPU)",
    )
    parser.add_argument(
        "--dropatt",
        type=float,
        default=0.0,
        help="attention dropout of our steps (HF has one dropout, config.dropout: 0 here)",
    )
    parser.add_argument(
        "--triton_tiles",
        default=None,
        help="the GPU kernel's block (rows = keys per tile, a power of two), warps, stages for "
        "every shape (default: the kernel's per-shape table)",
    )
    parser.add_argument("--child", choices=sorted(FRAMEWORKS), help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def shape_config(args: argparse.Namespace, name: str, batch: int):
    """The harness shape at this batch and compute dtype."""
    from harness import shape_config as harness_shape

    return harness_shape(name, batch_size=batch, dtype=args.dtype, dropatt=args.dropatt)


def is_out_of_memory(error: BaseException) -> bool:
    """True for a device allocation failure of either framework."""
    text = f"{type(error).__name__}: {error}"
    return "RESOURCE_EXHAUSTED" in text or "OutOfMemory" in text or "out of memory" in text


def run_ours(args: argparse.Namespace, config) -> dict:
    """Times our train step; with --breakdown, also traces 3 steps and sums device time."""
    import jax
    from harness import make_trainer, time_calls

    trainer = make_trainer(config)
    times = time_calls(trainer.run, args.iters)
    loss = float(trainer.run()["loss"])
    device = jax.local_devices()[0]
    stats = device.memory_stats() or {}
    result = dict(times=times, loss=loss, peak_bytes=stats.get("peak_bytes_in_use"))
    if args.breakdown:
        with tempfile.TemporaryDirectory() as trace_dir:
            with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                for _ in range(3):
                    trainer.run()
            result["breakdown"] = device_time_by_category(trace_dir)
    return result


def run_hf(args: argparse.Namespace, config, compiled: bool) -> dict:
    """Times HF's step on torch's accelerator (CPU if none) with our weights and masks."""
    import torch
    from harness import synthetic_batch, time_calls
    from train_throughput import HFTrainer

    from xlnet_jax.training import sharding
    from xlnet_jax.training.program import build_program

    # JAX runs on the CPU in this process (JAX_PLATFORMS=cpu): it only makes the weights
    # and rng our side starts from, and the masks our step samples from them.
    program = build_program(config, sharding.make_mesh(config))
    with program.activate():
        state = program.init_state()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    amp = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(args.dtype)
    warmup = 3  # torch.compile traces twice: the first step has no mems yet
    trainer = HFTrainer(
        config,
        state.params,
        synthetic_batch(config),
        state.rng,
        args.iters + warmup,
        device=device,
        amp_dtype=amp,
        compiled=compiled,
    )
    times = time_calls(trainer.run, args.iters, warmup=warmup)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return dict(times=times, loss=trainer.run(), peak_bytes=peak)


def child_main(args: argparse.Namespace) -> None:
    """Runs one framework at one shape and batch; prints one RESULT line (or an OOM mark)."""
    sys.path.insert(0, HERE)
    config = shape_config(args, args.shape, args.batch)
    try:
        if args.child in OURS:
            config.attention_impl = "pallas" if args.child == "kernel" else "xla"
            if args.triton_tiles:
                use_triton_tiles(args.triton_tiles)
            result = run_ours(args, config)
        else:
            result = run_hf(args, config, compiled=args.child == "compile")
    except Exception as error:  # noqa: BLE001 - an OOM is a result; anything else re-raises
        if not is_out_of_memory(error):
            raise
        result = dict(oom=True)
    print(RESULT + json.dumps(result), flush=True)


def use_triton_tiles(tiles: str) -> None:
    """Sets the GPU kernel's tile from --triton_tiles (block, warps, stages)."""
    from xlnet_jax.model.kernels.gpu import attention as triton_attention
    from xlnet_jax.model.kernels.gpu import tiles as gpu_tiles

    block, warps, stages = (int(x) for x in tiles.split(","))
    launch = gpu_tiles.Launch(warps, stages)
    triton_attention.GPU_TILES = gpu_tiles.Tiles(block, launch, launch, launch)


def run_child(args: argparse.Namespace, framework: str, shape: str, batch: int) -> dict:
    """One framework at one shape and batch, in a fresh process; its RESULT as a dict."""
    env = dict(os.environ)
    if framework not in OURS:
        env["JAX_PLATFORMS"] = "cpu"  # the device is torch's in HF's process
    command = [sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
    command += ["--child", framework, "--shape", shape, "--batch", str(batch)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        sys.exit(
            f"{FRAMEWORKS[framework]} at {shape}, batch {batch} failed:\n{done.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(RESULT) :])


def largest_batch(args, framework: str, shape: str, first: dict) -> tuple[int, dict] | None:
    """Doubles the batch from --batch (whose result is `first`) until the framework runs out
    of memory; the largest batch that ran and its result, or None if --batch did not."""
    batch, best = args.batch, None
    result = first
    while not result.get("oom"):
        best = (batch, result)
        batch *= 2
        result = run_child(args, framework, shape, batch)
    return best


def device_time_by_category(trace_dir: str) -> dict[str, float]:
    """Seconds of device time per category in a perfetto trace of jax.profiler: the complete
    events of processes named for a device (/device:GPU:0, /device:TPU:0). Empty on a CPU,
    whose trace has no device timeline."""
    paths = [
        os.path.join(root, name)
        for root, _, names in os.walk(trace_dir)
        for name in names
        if name.endswith(".trace.json.gz")
    ]
    with gzip.open(paths[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    devices = {pid for pid, name in names.items() if "/device:" in name}
    totals: dict[str, float] = {}
    for event in events:
        if event.get("ph") != "X" or event.get("pid") not in devices:
            continue
        name = event.get("name", "").lower()
        category = next((c for c, rx in CATEGORIES if re.search(rx, name)), "other")
        totals[category] = totals.get(category, 0.0) + event.get("dur", 0) / 1e6
    return totals


def matmul_peak_tflops(n: int, dtype: str) -> float:
    """Median TFLOP/s of one n x n x n matmul in `dtype` on JAX's first device."""
    import jax
    import jax.numpy as jnp
    from harness import time_calls

    a = jnp.ones((n, n), dtype)
    dot = jax.jit(jnp.dot)
    times = time_calls(lambda: dot(a, a).block_until_ready(), 10)
    return 2 * n**3 / statistics.median(times) / 1e12


def print_table(args: argparse.Namespace, rows: list, peak: float | None, measured: float) -> None:
    """The markdown table: one row per (shape, batch, framework)."""
    from harness import describe, ms

    from xlnet_jax.model import flops

    print("| shape | batch | framework | step ms | tokens/s | MFU (datasheet) | MFU (matmul) "
          "| peak memory GiB | speed vs HF |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    # The reference is HF's fastest mode that ran: torch.compile, else eager.
    reference = {}
    for mode in ("eager", "compile"):
        for shape, batch, framework, result in rows:
            if framework == mode and not result.get("oom"):
                reference[shape, batch] = result["times"]
    for shape, batch, framework, result in rows:
        if result.get("oom"):
            print(f"| {shape} | {batch} | {FRAMEWORKS[framework]} | out of memory |||||| ")
            continue
        config = shape_config(args, shape, batch)
        median = statistics.median(result["times"])
        tflops = flops.train_flops_per_step(config) / median / 1e12
        mfu = f"{100 * tflops / peak:.1f}%" if peak else "n/a"
        memory = f"{result['peak_bytes'] / 2**30:.1f}" if result["peak_bytes"] else "n/a"
        base = reference.get((shape, batch))
        speedup = f"{statistics.median(base) / median:.2f}x" if base else "n/a"
        print(
            f"| {shape} | {batch} | {FRAMEWORKS[framework]} | {ms(result['times'])} | "
            f"{config.batch_size * config.seq_len / median:,.0f} | {mfu} | "
            f"{100 * tflops / measured:.1f}% | {memory} | {speedup} |"
        )
    print()
    for shape in args.shapes.split(","):
        print(f"{shape}: {describe(shape_config(args, shape, args.batch))}")
    for shape, batch, framework, result in rows:
        if "loss" in result:
            print(f"loss after the timed steps, {shape} batch {batch} {FRAMEWORKS[framework]}: "
                  f"{result['loss']:.4f}")  # fmt: skip
        if "breakdown" in result and not result["breakdown"]:
            print("device time by category: the trace has no device timeline (a CPU)")
        elif "breakdown" in result:
            total = sum(result["breakdown"].values())
            parts = sorted(result["breakdown"].items(), key=lambda kv: -kv[1])
            print(f"device time of 3 steps, {shape} batch {batch} (xlnet-jax): " + ", ".join(
                f"{name} {100 * seconds / total:.0f}%" for name, seconds in parts))  # fmt: skip


def main() -> None:
    args = parse_args()
    if args.child:
        child_main(args)
        return
    sys.path.insert(0, HERE)
    import jax

    from xlnet_jax.hardware import chips

    device = jax.local_devices()[0]
    peak = chips.datasheet_peak_tflops(device.device_kind)
    measured = matmul_peak_tflops(args.peak_n, args.dtype)
    versions = f"jax {jax.__version__}"
    hf_modes = [] if args.hf == "none" else args.hf.split(",")
    if hf_modes:
        import torch
        import transformers

        versions += f", torch {torch.__version__}, transformers {transformers.__version__}"
    print(f"device: {device.device_kind} ({device.platform}); {versions}")
    print(f"datasheet dense bf16 peak: {f'{peak:g} TFLOP/s' if peak else 'not listed'}; "
          f"measured {args.peak_n}^3 {args.dtype} matmul: {measured:.1f} TFLOP/s")  # fmt: skip
    print("step time: median (min-max) ms; each framework in its own process, back to back\n")
    rows = []
    for shape in args.shapes.split(","):
        for framework in ["ours", *(["kernel"] if args.kernel else []), *hf_modes]:
            first = run_child(args, framework, shape, args.batch)
            rows.append((shape, args.batch, framework, first))
            largest = largest_batch(args, framework, shape, first) if args.search else None
            if largest and largest[0] != args.batch:
                rows.append((shape, largest[0], framework, largest[1]))
    print_table(args, rows, peak, measured)


if __name__ == "__main__":
    main()
