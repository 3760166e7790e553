"""One command for any NVIDIA GPU: is the fused kernel right on this device, and how fast is it?

With only the preinstalled jax (0.10.2-0.12) and the package's pure-Python dependencies:

1. **Check**: the kernel against the XLA attention path on the device, at base's widths and
   sequence (2 layers, so that it compiles in seconds), bfloat16 and float32, attention
   dropout 0 and 0.1: the loss and the new memory (forward) and every parameter's gradient,
   each as its largest difference over the largest entry of the XLA path's value.
2. **Time** the train step at base and large (batch 16, bfloat16): the XLA path, the kernel,
   and HF `XLNetLMHeadModel` eager and under torch.compile where torch is installed.
3. **Sweep** a few tile settings of the kernel at the first shape.

Before them, on a card of the chip table that `xlnet-jax compile --gpu` describes, the same
steps of ours (XLA path and kernel) are compiled for that card from the CPU, as `compile
--gpu` does (a child with JAX_PLATFORMS=cpu): the table puts XLA's predicted peak beside the
measured one.

Every measurement runs in its own process (`accelerator_throughput.py`'s children, the same
train step, weights and masks on both frameworks), one after the other, so each has the
whole card and its own peak memory; JAX children take at most XLA_PYTHON_CLIENT_MEM_FRACTION
of it. It prints one table (step ms, tokens/s, MFU against the datasheet bf16 peak and
against a bf16 matmul measured in the same run, peak memory) and writes it, with the
checks, as JSON. Exits 1 if a check fails or a measurement breaks.

  python benchmarks/gpu_check.py                     # on an NVIDIA GPU: < 8 minutes on an H100
  python benchmarks/gpu_check.py --hf none --sweep ""   # ours only, no tile sweep
  JAX_PLATFORMS=cpu python benchmarks/gpu_check.py   # on a CPU: a smoke pass, measures nothing

The sweep's tiles go through `accelerator_throughput.py --triton_tiles block,warps,stages`
(`use_triton_tiles` there: the kernel's override of its per-shape tile table).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

# No platform default: the check runs on whatever JAX finds (harness would pick the CPU).
os.environ.setdefault("JAX_PLATFORMS", "")

HERE = os.path.dirname(os.path.abspath(__file__))
THROUGHPUT = os.path.join(HERE, "accelerator_throughput.py")
RESULT = "RESULT "  # prefix of a child's one-line JSON result (as accelerator_throughput's)
FRAMEWORKS = {
    "ours": "xlnet-jax, XLA attention",
    "kernel": "xlnet-jax, kernel",
    "eager": "HF eager",
    "compile": "HF torch.compile",
}
# A JAX child's share of the card: the rest stays free for the driver and a stray allocation.
MEM_FRACTION = "0.9"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="base,large", help="harness shapes to time")
    parser.add_argument("--batch", type=int, default=16, help="global batch of the timed steps")
    parser.add_argument("--iters", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--dtype", default="bfloat16", help="compute dtype of the timed steps")
    parser.add_argument("--dropatt", type=float, default=0.0, help="our steps' attention dropout")
    parser.add_argument("--hf", default="eager,compile", help="HF modes: eager,compile or none")
    parser.add_argument(
        "--sweep",
        default="32,4,2;64,8,2;128,8,2",
        help="kernel tiles to time at the first shape, ';'-separated block,warps,stages "
        "(the kernel row itself uses its per-shape table)",
    )
    parser.add_argument("--check_shape", default="base", help="harness shape of the check")
    parser.add_argument("--check_batch", type=int, default=4, help="batch of the check")
    parser.add_argument("--peak_n", type=int, default=8192, help="size of the measured matmul")
    parser.add_argument("--json", default="gpu_check.json", help="where the results go")
    parser.add_argument("--child", choices=["check", "predict"], help=argparse.SUPPRESS)
    parser.add_argument("--card", help=argparse.SUPPRESS)  # the predict child's --gpu name
    return parser.parse_args(argv)


# What the check compares, (dtype, dropatt); on a CPU (the kernel interpreted) one of them.
CHECKS = (("bfloat16", 0.0), ("bfloat16", 0.1), ("float32", 0.0), ("float32", 0.1))
SMOKE_CHECKS = (("float32", 0.1),)


def smoke_args(args: argparse.Namespace) -> argparse.Namespace:
    """On a CPU: the toy shape in float32, one check, one timed step of ours and the kernel
    (HF's child and the tile override have their smoke test in accelerator_throughput's)."""
    smoke = dict(shapes="toy", batch=4, iters=1, dtype="float32", hf="none", sweep="")
    return argparse.Namespace(**{**vars(args), **smoke, "check_shape": "toy", "peak_n": 256})


# ----------------------------------------------------------------------------- the check


def loss_and_grads(config, params, impl: str) -> tuple:
    """(loss, new memory, gradients) of one forward and backward of the train step's loss,
    through attention_impl `impl`, on the harness batch and a memory of 0.1: the kernel
    check's own function (xlnet_jax/training/kernel_check.py)."""
    import jax
    import jax.numpy as jnp
    from harness import synthetic_batch

    from xlnet_jax.training import kernel_check

    batch = jax.tree.map(jnp.asarray, synthetic_batch(config))
    mems = jnp.full((config.n_layer, config.batch_size, config.mem_len, config.d_model), 0.1)
    return kernel_check.loss_and_grads(config, impl, params, batch, mems)


def check(args: argparse.Namespace, cases) -> list[dict]:
    """The kernel against the XLA path, per (dtype, dropatt) case: forward and gradients."""
    import jax
    from harness import init_params, shape_config

    from xlnet_jax.model.kernels import agreement

    results = []
    for dtype, dropatt in cases:
        # float32 means float32; a bf16 run keeps the default (Mosaic refuses bf16 matmuls
        # asked for at full float32 precision, as training/kernel_check.py found).
        jax.config.update("jax_default_matmul_precision", "highest" if dtype == "float32" else None)
        config = shape_config(
            args.check_shape, n_layer=2, batch_size=args.check_batch, dtype=dtype,
            dropatt=dropatt,
        )  # fmt: skip
        params = init_params(config)
        xla = loss_and_grads(config, params, "xla")
        kernel = loss_and_grads(config, params, "pallas")
        tolerance = agreement.tolerance(dtype)
        differences = {
            name: agreement.relative_difference(kernel[i], xla[i])
            for i, name in enumerate(("loss", "memory", "gradients"))
        }
        ok = all(d <= tolerance for d in differences.values())
        results.append(
            dict(dtype=dtype, dropatt=dropatt, **differences, tolerance=tolerance, ok=ok)
        )
    return results


def child_main(args: argparse.Namespace) -> None:
    """The check and the matmul peak, on JAX's first device; one RESULT line."""
    sys.path.insert(0, HERE)
    import jax
    from accelerator_throughput import matmul_peak_tflops

    from xlnet_jax.hardware import chips

    device = jax.local_devices()[0]
    cpu = device.platform == "cpu"
    if cpu:
        args = smoke_args(args)
    result = dict(
        device=device.device_kind,
        platform=device.platform,
        jax=jax.__version__,
        datasheet_tflops=chips.datasheet_peak_tflops(device.device_kind),
        matmul_tflops=matmul_peak_tflops(args.peak_n, "float32" if cpu else "bfloat16"),
        checks=check(args, SMOKE_CHECKS if cpu else CHECKS),
    )
    print(RESULT + json.dumps(result), flush=True)


# ------------------------------------------------------------------------ the prediction


def predict_main(args: argparse.Namespace) -> None:
    """The deviceless compile of each timed step of ours for `args.card`: XLA's peak bytes,
    keyed shape/framework; one RESULT line."""
    sys.path.insert(0, HERE)
    from accelerator_throughput import shape_config

    from xlnet_jax.training import aot, aot_devices

    peaks = {}
    for shape in args.shapes.split(","):
        for framework, impl in (("ours", "xla"), ("kernel", "pallas")):
            config = shape_config(args, shape, args.batch)
            config.attention_impl = impl
            report, _ = aot.compile_train_step(config, aot_devices.gpu_target(args.card))
            peaks[f"{shape}/{framework}"] = report.peak_bytes
    print(RESULT + json.dumps(peaks), flush=True)


def predicted_peaks(device_kind: str) -> tuple[dict, str]:
    """(predicted peak bytes per shape/framework, what was predicted for) from a CPU child;
    empty where the card is not one `compile --gpu` describes or the compile fails."""
    from xlnet_jax.hardware import chips

    card = chips.chip_for(device_kind)
    if card is None or card.gpu is None:
        return {}, f"no prediction: {device_kind} is not a card `compile --gpu` describes"
    command = [sys.executable, __file__, "--child", "predict", "--card", card.gpu_name,
               *sys.argv[1:]]  # fmt: skip
    peaks, error = run(command, dict(os.environ, JAX_PLATFORMS="cpu"))
    if peaks is None:
        last = error.strip().splitlines()[-1] if error.strip() else "no result"
        return {}, f"no prediction: the CPU compile for {card.gpu_name} failed ({last})"
    return peaks, f"predicted on the CPU for --gpu {card.gpu_name}"


# ------------------------------------------------------------------------- the parent


def run(command: list[str], env: dict) -> tuple[dict | None, str]:
    """Runs a child; (its RESULT as a dict, or None, and the last of its stderr)."""
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        return None, done.stderr[-3000:]
    return json.loads(lines[-1][len(RESULT) :]), ""


def child_env(framework: str) -> dict:
    """JAX children take MEM_FRACTION of the card; HF's children keep JAX on the CPU (it only
    makes the weights and masks there) and give the card to torch."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_MEM_FRACTION=MEM_FRACTION)
    if framework in ("eager", "compile"):
        env["JAX_PLATFORMS"] = "cpu"
    return env


def time_step(args, framework: str, shape: str, tiles: str | None = None) -> dict:
    """One train-step measurement in its own process (accelerator_throughput's child)."""
    command = [sys.executable, THROUGHPUT, "--child", framework, "--shape", shape]
    command += ["--batch", str(args.batch), "--dtype", args.dtype, "--iters", str(args.iters)]
    command += ["--dropatt", str(args.dropatt)]
    if tiles:
        command += ["--triton_tiles", tiles]
    result, error = run(command, child_env(framework))
    row = dict(shape=shape, batch=args.batch, framework=framework, tiles=tiles)
    if result is None:
        return dict(row, error=error.strip().splitlines()[-1] if error.strip() else "no result")
    if result.get("oom"):
        return dict(row, error="out of memory")
    median = statistics.median(result["times"])
    return dict(row, step_s=median, min_s=min(result["times"]), max_s=max(result["times"]),
                loss=result["loss"], peak_bytes=result["peak_bytes"])  # fmt: skip


def add_rates(args, row: dict, datasheet: float | None, matmul: float) -> dict:
    """tokens/s and MFU (against the datasheet peak and the measured matmul) of a timed row."""
    from harness import shape_config

    from xlnet_jax.model import flops

    if "step_s" not in row:
        return row
    config = shape_config(row["shape"], batch_size=row["batch"], dtype=args.dtype)
    tflops = flops.train_flops_per_step(config) / row["step_s"] / 1e12
    return dict(
        row,
        tokens_per_s=config.batch_size * config.seq_len / row["step_s"],
        mfu_datasheet=tflops / datasheet if datasheet else None,
        mfu_matmul=tflops / matmul,
    )


def print_report(args, header: dict, rows: list[dict]) -> None:
    """The checks, then the one table of every timed step."""
    print("| check | dtype | dropatt | loss | memory | gradients | tolerance |")
    print("|---|---|---|---|---|---|---|")
    for c in header["checks"]:
        print(f"| {'ok' if c['ok'] else 'FAIL'} | {c['dtype']} | {c['dropatt']} | "
              f"{c['loss']:.2e} | {c['memory']:.2e} | {c['gradients']:.2e} | "
              f"{c['tolerance']:.2e} |")  # fmt: skip
    print("\n(largest difference of the kernel from the XLA path over the XLA value's largest "
          f"entry; {args.check_shape} widths, 2 layers, batch {args.check_batch})\n")  # fmt: skip
    print("| shape | batch | framework | tiles | step ms | tokens/s | MFU (datasheet) "
          "| MFU (matmul) | peak memory GiB | predicted peak GiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        label = f"| {r['shape']} | {r['batch']} | {FRAMEWORKS[r['framework']]} | "
        label += f"{r['tiles'] or ('per shape' if r['framework'] == 'kernel' else '')} | "
        if "error" in r:
            print(label + f"{r['error'][:160]} ||||||")
            continue
        ms = f"{1e3 * r['step_s']:.1f} ({1e3 * r['min_s']:.1f}-{1e3 * r['max_s']:.1f})"
        datasheet = f"{100 * r['mfu_datasheet']:.1f}%" if r["mfu_datasheet"] else "n/a"
        memory = f"{r['peak_bytes'] / 2**30:.2f}" if r["peak_bytes"] else "n/a"
        predicted = r.get("predicted_peak_bytes")
        predicted = f"{predicted / 2**30:.2f}" if predicted else "n/a"
        print(label + f"{ms} | {r['tokens_per_s']:,.0f} | {datasheet} | "
              f"{100 * r['mfu_matmul']:.1f}% | {memory} | {predicted} |")  # fmt: skip


def main() -> None:
    args = parse_args()
    if args.child == "predict":
        predict_main(args)
        return
    if args.child:
        child_main(args)
        return
    sys.path.insert(0, HERE)
    header, error = run([sys.executable, __file__, "--child", "check", *sys.argv[1:]],
                        child_env("ours"))  # fmt: skip
    if header is None:
        sys.exit(f"gpu_check: the kernel check failed to run:\n{error}")
    cpu = header["platform"] == "cpu"
    if cpu:
        args = smoke_args(args)
        print("No GPU: JAX's device is a CPU. A smoke pass at the toy shape (one check, the "
              "kernel in interpret mode, no HF, no sweep): the figures below measure "
              "nothing.\n")  # fmt: skip
    versions = f"jax {header['jax']}"
    hf_modes = [] if args.hf == "none" else args.hf.split(",")
    if hf_modes:  # torch is loaded only for HF's rows (seconds of the CPU smoke pass)
        try:
            import torch

            versions += f", torch {torch.__version__}"
        except ImportError:
            print("torch is not installed: no HF rows.")
            hf_modes = []
    datasheet, matmul = header["datasheet_tflops"], header["matmul_tflops"]
    print(f"device: {header['device']} ({header['platform']}); {versions}")
    print(f"datasheet dense bf16 peak: {f'{datasheet:g} TFLOP/s' if datasheet else 'not listed'}"
          f"; measured {args.peak_n}^3 matmul: {matmul:.2f} TFLOP/s\n")  # fmt: skip
    predicted, predicted_for = ({}, "") if cpu else predicted_peaks(header["device"])
    rows = []
    for shape in args.shapes.split(","):
        for framework in ("ours", "kernel", *hf_modes):
            rows.append(time_step(args, framework, shape))
    first = args.shapes.split(",")[0]
    for tiles in filter(None, args.sweep.split(";")):
        rows.append(time_step(args, "kernel", first, tiles))
    rows = [add_rates(args, row, datasheet, matmul) for row in rows]
    for row in rows:
        if not row["tiles"]:
            row["predicted_peak_bytes"] = predicted.get(f"{row['shape']}/{row['framework']}")
    if predicted_for:
        print(f"peak memory: measured on the card; {predicted_for} (XLA's plan)\n")
    print_report(args, header, rows)
    with open(args.json, "w") as f:
        json.dump(dict(header, measured=not cpu, args=vars(args), rows=rows), f, indent=1)
    print(f"\nwritten: {args.json}")
    if not all(c["ok"] for c in header["checks"]) or any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
