"""How our train step scales: with seq_len, with num_predict, and with (simulated) devices.

* seq_len 128/256/512 at the bench width, mem = reuse = seq/2, num_predict ~ seq/6.
* num_predict ~L/6, L/2, ~L at the bench shape: the query stream runs on the target rows
  only, so the step time should grow linearly in num_predict (a fit is printed).
* devices 1/2/4/8: subprocesses with --xla_force_host_platform_device_count, data
  parallel, per-device batch fixed (weak scaling). The simulated devices share this
  machine's cores, so the ideal step time grows with the device count: the table reports
  the time per device-batch against one device's.

python benchmarks/scaling.py [--only seq,predict,devices] [--iters 10]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np
from harness import describe, machine, make_trainer, ms, shape_config, time_calls

from xlnet_jax.model import flops


def step_times(config, iters: int) -> list[float]:
    """Wall seconds of `iters` train steps after warm-up."""
    trainer = make_trainer(config)
    return time_calls(trainer.run, iters)


def seq_rows(shape: str, iters: int) -> list[str]:
    rows = []
    for seq in (128, 256, 512):
        config = shape_config(
            shape, seq_len=seq, mem_len=seq // 2, reuse_len=seq // 2, perm_size=seq // 2,
            num_predict=round(seq / 6),
        )  # fmt: skip
        times = step_times(config, iters)
        tokens = config.batch_size * seq / statistics.median(times)
        gflops = flops.train_flops_per_step(config) / statistics.median(times) / 1e9
        rows.append(
            f"| {seq} | {config.num_predict} | {ms(times)} | {tokens:,.0f} | {gflops:.1f} |"
        )
    return rows


def predict_rows(shape: str, iters: int) -> list[str]:
    base = shape_config(shape)
    length = base.seq_len
    # Most targets the objective allows: num_predict // 2 in the new block (three functional
    # tokens are never targets), the rest in the reuse block.
    most = min(2 * (length - base.reuse_len - 3) + 1, 2 * base.reuse_len)
    counts = (round(length / 6), length // 2, most)
    medians, rows = [], []
    for count in counts:
        times = step_times(shape_config(shape, num_predict=count), iters)
        medians.append(statistics.median(times))
        rows.append(f"| {count} | {count / length:.2f} | {ms(times)} |")
    slope, intercept = np.polyfit(counts, medians, 1)
    fitted = np.polyval((slope, intercept), counts)
    worst = max(abs(f - m) / m for f, m in zip(fitted, medians, strict=True))
    rows.append(
        f"\nfit: step = {1e3 * intercept:.0f} ms + {1e3 * slope:.2f} ms x num_predict "
        f"(worst residual {100 * worst:.1f}%); the query stream of L/6 targets costs "
        f"{100 * slope * counts[0] / medians[0]:.0f}% of the step"
    )
    return rows


def device_worker(shape: str, per_device: int, iters: int) -> None:
    """Runs in a subprocess: prints one JSON line with the step times on all devices."""
    import jax

    config = shape_config(shape, batch_size=per_device * jax.device_count())
    print(json.dumps({"devices": jax.device_count(), "times": step_times(config, iters)}))


def device_rows(shape: str, per_device: int, counts: list[int], iters: int) -> list[str]:
    rows, one = [], None
    for count in counts:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={count}")
        command = [sys.executable, __file__, "--worker", shape, str(per_device), str(iters)]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        median = statistics.median(report["times"])
        one = one or median
        rows.append(
            f"| {report['devices']} | {per_device * count} | {ms(report['times'])} | "
            f"{median / count / one:.2f} |"
        )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        device_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="seq,predict,devices")
    parser.add_argument("--shape", default="bench", help="width/layout of the seq and predict rows")
    parser.add_argument("--device_shape", default="small")
    parser.add_argument("--per_device_batch", type=int, default=4)
    parser.add_argument("--device_counts", default="1,2,4,8")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    parts = args.only.split(",")
    print(f"machine: {machine()}\nstep ms: median (min-max) of {args.iters} steps\n")
    if "seq" in parts:
        print(f"seq_len, at {describe(shape_config(args.shape))} otherwise:")
        print(
            "| seq_len | num_predict | step ms | tokens/s | model GFLOP/s |\n|---|---|---|---|---|"
        )
        print("\n".join(seq_rows(args.shape, args.iters)) + "\n")
    if "predict" in parts:
        print(f"num_predict, at {describe(shape_config(args.shape))} otherwise:")
        print("| num_predict | / seq_len | step ms |\n|---|---|---|")
        print("\n".join(predict_rows(args.shape, args.iters)) + "\n")
    if "devices" in parts:
        config = shape_config(args.device_shape, batch_size=args.per_device_batch)
        print(f"simulated devices (data parallel), per device: {describe(config)}")
        print("| devices | global batch | step ms | step / (devices x 1-device step) |")
        print("|---|---|---|---|")
        print(
            "\n".join(
                device_rows(
                    args.device_shape,
                    args.per_device_batch,
                    [int(n) for n in args.device_counts.split(",")],
                    args.iters,
                )
            )
        )
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
