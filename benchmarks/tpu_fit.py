"""Does base/large fit real TPU topologies? AOT-compiles the train step for each row, from a CPU.

Every row is one `xlnet-jax compile` command (printed beside it), run in its own process;
the attention rows set the config as published (attention_impl=auto: the Pallas kernel on
a TPU, with its dropatt 0.1) beside the XLA path. The step-time column is a lower bound (the
model's FLOPs at the chip's datasheet peak), not a speed: no TPU ran these programs. Also
searches the largest per-device batch that fits, with and without remat, on a small slice of
the same chip (pure data parallelism: per-device memory does not depend on the number of
devices), with the search `xlnet-jax compile` runs when a step does not fit
(xlnet_jax/training/fit.py).

  python benchmarks/tpu_fit.py --jobs 2   # the README table (slow: minutes per row)
  python benchmarks/tpu_fit.py --quick    # tiny config, small slices (CI-sized)
"""

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys

from xlnet_jax.training import aot, aot_devices, fit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SECONDS_PER = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}  # units of the compile report's times


@dataclasses.dataclass(frozen=True)
class Row:
    """One compile: a preset on a topology with overrides."""

    config: str
    topology: str
    overrides: tuple[str, ...] = ()

    def command(self) -> list[str]:
        return [
            "xlnet-jax", "compile", "--config", f"configs/{self.config}.py",
            "--topology", self.topology, *self.overrides,
        ]  # fmt: skip


def attention_rows(config: str, topology: str) -> list[Row]:
    """The config as it is (auto: the kernel on a TPU) beside the XLA attention path."""
    return [Row(config, topology), Row(config, topology, ("--config.attention_impl=xla",))]


FULL_ROWS = [
    Row("large", "v3:16x32"),
    *attention_rows("large", "v4:8x8x8"),
    *attention_rows("large", "v5e:16x16"),
    Row("large", "v5p:8x8x8"),
    Row("base", "v3:16x32"),
]
QUICK_ROWS = [
    Row("tiny", "v3:2x2"),
    *attention_rows("tiny", "v4:2x2x1"),
    Row("tiny", "v5e:2x2"),
]


def run_compile(row: Row) -> dict:
    """Runs one compile in a subprocess and parses its report."""
    argv = [sys.executable, "-m", "xlnet_jax.cli", *row.command()[1:]]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    out = done.stdout
    devices = re.search(r"(\d+) devices \([^)]*\), ([\d.]+) GiB HBM", out)
    peak = re.search(r"(?:fits|does not fit): peak ([\d.]+) GiB", out)
    temp = re.search(r"temp +([\d.]+) GiB", out)
    step = re.search(r"100% / 50% MFU: ([\d.]+) (µs|ms|s) /", out)
    if not (devices and peak and step):
        raise RuntimeError(f"{' '.join(row.command())} failed:\n{out}\n{done.stderr[-3000:]}")
    return {
        "devices": int(devices.group(1)),
        "hbm": float(devices.group(2)),
        "peak": float(peak.group(1)),
        "temp": float(temp.group(1)) if temp else None,  # absent when it does not fit
        "fits": "does not fit" not in out,
        "t100": float(step.group(1)) * SECONDS_PER[step.group(2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config on small slices")
    parser.add_argument("--no-search", action="store_true", help="skip the batch search")
    parser.add_argument("--no-rows", action="store_true", help="only the batch search")
    parser.add_argument("--jobs", type=int, default=1, help="compiles run at once")
    args = parser.parse_args()
    rows = QUICK_ROWS if args.quick else FULL_ROWS

    if not args.no_rows:
        print("| command | devices | peak / HBM GiB per device | temp GiB | fits "
              "| step s at 100% MFU (a lower bound, not a speed) |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for row, r in zip(rows, pool.map(run_compile, rows), strict=True):
                temp = "n/a" if r["temp"] is None else f"{r['temp']:.2f}"
                print(
                    f"| `{' '.join(row.command())}` | {r['devices']} | {r['peak']:.2f} / "
                    f"{r['hbm']:.1f} | {temp} | {'yes' if r['fits'] else 'NO'} | "
                    f"≥ {r['t100']:.3g} |",
                    flush=True,
                )
    if args.no_search:
        return
    name, topology = ("tiny", "v3:2x2") if args.quick else ("large", "v3:2x2")
    spec = importlib.util.spec_from_file_location(name, f"{ROOT}/configs/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    print(
        f"\nLargest per-device batch for {name} on {topology} (data parallel; each try is "
        f"`xlnet-jax compile --config configs/{name}.py --topology {topology} "
        "--config.batch_size=N --config.remat=R`):"
    )
    for remat in (True, False):
        with aot.libtpu_log_held():
            best, _ = fit.largest_fitting_batch(
                config, aot_devices.tpu_target(topology), remat=remat,
                limit_rows=4 if args.quick else 64,
                on_try=lambda t: print(t.describe(), flush=True),
            )  # fmt: skip
        print(f"  remat={remat}: {best.rows if best else 0} rows per device", flush=True)


if __name__ == "__main__":
    main()
