"""Host memory of training: peak RSS per shape, and the longest seq_len that fits 24 GB.

* Peak RSS: one subprocess per (shape, framework) builds the model, runs 3 train steps
  and reports its resource.getrusage maxrss; ours also reports XLA's compiled estimate
  (arguments + outputs + temporaries - donated aliases).
* Longest seq_len at base width (12x768), batch 1, layout scaled from the base preset
  (mem = 3/4, reuse = 1/2, num_predict ~ 1/6 of seq_len), with and without remat: each
  candidate is compiled (not run: a base step at several thousand tokens takes minutes
  here) in a subprocess, and fits when the process's RSS before compiling plus XLA's
  estimate is at most --budget_gb. Doubling from 512, then bisecting to --resolution.

python benchmarks/memory.py [--shapes small,bench,base] [--no_search]
"""

import argparse
import json
import os
import resource
import subprocess
import sys

from harness import describe, init_params, machine, make_trainer, shape_config, synthetic_batch

GB = 1e9


def compiled_bytes(compiled) -> int:
    """XLA's estimate of the step's memory: arguments + outputs + temporaries - aliases."""
    m = compiled.memory_analysis()
    return (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )


def maxrss_bytes() -> int:
    """This process's resident-set high-water mark (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker_rss(shape: str, framework: str) -> dict:
    """Builds `shape` in `framework`, runs 3 steps; its peak RSS (and ours, XLA's estimate).

    HF starts from our initial weights (init only, nothing of ours is compiled or run).
    """
    config = shape_config(shape)
    if framework == "jax":
        trainer = make_trainer(config)
        for _ in range(3):
            trainer.run()
        return {"estimate": compiled_bytes(trainer.step), "rss": maxrss_bytes()}
    import jax
    import torch
    from train_throughput import HFTrainer

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    rng = jax.random.key_data(jax.random.PRNGKey(config.seed))
    hf_trainer = HFTrainer(config, init_params(config), synthetic_batch(config), rng, 3)
    for _ in range(3):
        hf_trainer.run()
    return {"rss": maxrss_bytes()}


def worker_fit(seq_len: int, remat: bool) -> dict:
    """Compiles the base-width step at `seq_len`, batch 1; RSS before and XLA's estimate."""
    from xlnet_jax.training import sharding
    from xlnet_jax.training.program import build_program

    config = fit_config(seq_len, remat)
    baseline = maxrss_bytes()
    compiled = build_program(config, sharding.make_mesh(config)).compile_train_step()
    return {"baseline": baseline, "estimate": compiled_bytes(compiled)}


def fit_config(seq_len: int, remat: bool):
    """Base width at `seq_len`, batch 1, the base preset's layout scaled."""
    return shape_config(
        "base", seq_len=seq_len, mem_len=3 * seq_len // 4, reuse_len=seq_len // 2,
        perm_size=seq_len // 2, num_predict=round(seq_len / 6), batch_size=1, remat=remat,
    )  # fmt: skip


def subprocess_report(*args: str) -> dict:
    """Runs this script's worker with `args`; its JSON report."""
    command = [sys.executable, __file__, "--worker", *args]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def longest_fitting(remat: bool, budget: float, resolution: int) -> tuple[int, list[str]]:
    """Largest seq_len (a multiple of `resolution`) whose estimate fits; and the tries."""
    tries = []

    def fits(seq_len: int) -> bool:
        report = subprocess_report("fit", str(seq_len), str(int(remat)))
        total = report["baseline"] + report["estimate"]
        tries.append(f"{seq_len}: {total / GB:.1f} GB")
        return total <= budget

    good, bad = 0, 512
    while fits(bad):
        good, bad = bad, 2 * bad
    while bad - good > resolution:
        middle = (good + bad) // 2 // resolution * resolution
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good, tries


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, *rest = sys.argv[2:]
        if kind == "rss":
            report = worker_rss(rest[0], rest[1])
        else:
            report = worker_fit(int(rest[0]), rest[1] == "1")
        print(json.dumps(report))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,bench,base")
    parser.add_argument("--budget_gb", type=float, default=24.0)
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--no_search", action="store_true", help="skip the seq_len search")
    args = parser.parse_args()
    print(f"machine: {machine()}\n")
    print("| shape | xlnet-jax peak RSS | XLA estimate | HF torch peak RSS |\n|---|---|---|---|")
    for name in args.shapes.split(","):
        ours, theirs = subprocess_report("rss", name, "jax"), subprocess_report("rss", name, "hf")
        print(
            f"| {name} | {ours['rss'] / GB:.2f} GB | {ours['estimate'] / GB:.2f} GB | "
            f"{theirs['rss'] / GB:.2f} GB |"
        )
    print("\n".join(f"{name}: {describe(shape_config(name))}" for name in args.shapes.split(",")))
    if args.no_search:
        return
    print(f"\nlongest seq_len at base width, batch 1, in {args.budget_gb:g} GB:")
    print("| remat | longest seq_len | tries (RSS before compile + XLA estimate) |\n|---|---|---|")
    for remat in (False, True):
        best, tries = longest_fitting(remat, args.budget_gb * GB, args.resolution)
        print(f"| {'yes' if remat else 'no'} | {best} | {'; '.join(tries)} |")


if __name__ == "__main__":
    main()
