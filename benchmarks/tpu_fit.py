"""Does base/large fit real TPU topologies? AOT-compiles the train step for each row, from a CPU.

Every row is one `xlnet-jax compile` command (printed beside it), run in its own process.
Also searches the largest per-device batch that fits, with and without remat, on a small
slice of the same chip (pure data parallelism: per-device memory does not depend on the
number of devices).

  .venv/bin/python benchmarks/tpu_fit.py            # the README table (slow: minutes per row)
  .venv/bin/python benchmarks/tpu_fit.py --quick    # tiny config, small slices (CI-sized)
"""

import argparse
import dataclasses
import os
import re
import subprocess
import sys

PAPER_STEP_SECONDS = 0.95  # XLNet-Large: 500k steps in ~5.5 days on 512 TPU v3 chips.


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


FULL_ROWS = [
    Row("large", "v3:16x32"),
    Row("large", "v5e:16x16"),
    Row("large", "v4:8x8x8"),
    Row("base", "v3:16x32"),
    Row("large", "v5p:8x8x8"),
]
QUICK_ROWS = [Row("tiny", "v3:2x2"), Row("tiny", "v4:2x2x1"), Row("tiny", "v5e:2x2")]


def run_compile(row: Row) -> dict:
    """Runs one compile in a subprocess and parses its report."""
    argv = [sys.executable, "-m", "xlnet_jax.cli", *row.command()[1:]]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    out = done.stdout
    devices = re.search(r"(\d+) devices, ([\d.]+) GiB HBM", out)
    peak = re.search(r"(?:fits|does not fit): ([\d.]+) GiB", out)
    step = re.search(r"100% / 50% MFU: ([\d.]+) ms / ([\d.]+) ms", out)
    if not (devices and peak and step):
        raise RuntimeError(f"{' '.join(row.command())} failed:\n{out}\n{done.stderr[-3000:]}")
    return {
        "devices": int(devices.group(1)),
        "hbm": float(devices.group(2)),
        "peak": float(peak.group(1)),
        "fits": "does not fit" not in out,
        "t100": float(step.group(1)) / 1e3,
        "t50": float(step.group(2)) / 1e3,
    }


def largest_batch(config: str, topology: str, devices: int, remat: bool, limit: int) -> int:
    """Largest per-device batch (powers of two from 2 up to `limit`) whose step fits in HBM.

    Starts at 2: base and large use bi_data, which needs an even batch per data shard.
    """
    best = 0
    per_device = 2
    while per_device <= limit:
        row = Row(config, topology, (
            f"--config.batch_size={per_device * devices}",
            f"--config.remat={remat}",
        ))  # fmt: skip
        if not run_compile(row)["fits"]:
            break
        best, per_device = per_device, per_device * 2
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config on small slices")
    parser.add_argument("--no-search", action="store_true", help="skip the batch search")
    args = parser.parse_args()
    rows = QUICK_ROWS if args.quick else FULL_ROWS

    print("| command | devices | peak GiB / HBM GiB per device | fits | "
          "step s at 100% / 50% MFU | vs paper 0.95 s |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for row in rows:
        r = run_compile(row)
        ratio = ""
        if row.config == "large":
            ratio = f"{PAPER_STEP_SECONDS / r['t50']:.1f}x faster at 50%"
        print(
            f"| `{' '.join(row.command())}` | {r['devices']} | {r['peak']:.2f} / {r['hbm']:.1f} | "
            f"{'yes' if r['fits'] else 'NO'} | {r['t100']:.3f} / {r['t50']:.3f} | {ratio} |",
            flush=True,
        )
    if args.no_search:
        return
    config, topology, devices = ("tiny", "v3:2x2", 8) if args.quick else ("large", "v3:2x2", 8)
    limit = 4 if args.quick else 64
    print(
        f"\nLargest per-device batch for {config} on {topology} ({devices} devices, data "
        "parallel; each try is `xlnet-jax compile ... --config.batch_size=N`):"
    )
    for remat in (True, False):
        best = largest_batch(config, topology, devices, remat, limit)
        print(f"  remat={remat}: {best} rows per device", flush=True)


if __name__ == "__main__":
    main()
