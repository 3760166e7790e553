"""Kill a training run with SIGKILL again and again; check its resumes change nothing.

Trains a config once without interruption (the reference), then again in a second workdir
killed with SIGKILL --kills times, resuming after each kill. The kills land after seeded
random steps; --write_kills of them land DURING an asynchronous checkpoint write: the script
polls the checkpoint directory and kills while orbax's `<step>.orbax-checkpoint-tmp` directory
of the save in flight exists (no hook in the training code). At the end every logged loss
(metrics.jsonl, newest record per step) and the final checkpoint (params, optimiser state,
rng, step counters and the recurrence memory) must be bit-identical to the reference.

Prints one row per kill and a summary; exits 0 only if every kill landed where planned, every
resume started from the newest finalised checkpoint, at least one kill hit a checkpoint write
and nothing diverged. Bounded: everything stops after --timeout seconds (exit 1).

    python scripts/fault_injection.py --corpus_dir CORPUS --out /tmp/fault-injection
    python scripts/fault_injection.py --config configs/tiny.py --corpus_dir CORPUS \\
        --out /tmp/fi --kills 8 --checkpoint_every 5 --set num_train_steps=60
"""

import argparse
import dataclasses
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
TMP_SUFFIX = ".orbax-checkpoint-tmp"
POLL_S = 0.002


class Timeout(Exception):
    """The --timeout budget ran out."""


@dataclasses.dataclass
class Kill:
    """One SIGKILL: where it was aimed and what it hit."""

    during_write: bool  # aimed at the checkpoint write of `step`, else just after `step`
    step: int  # planned, then moved past the resume point if needed
    landed_after_step: int | None = None  # newest step logged when the kill landed
    unfinished_write: str = ""  # the tmp directory left behind, if the kill hit a save
    newest_checkpoint: int | None = None  # newest finalised step on disk after the kill
    resumed_from: int | None = None  # where the next run said it resumed (0: new run)

    @property
    def target(self) -> str:
        return (
            f"during write of step {self.step}" if self.during_write else f"after step {self.step}"
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--config",
        default=str(REPO / "tests" / "train_config.py"),
        help="config file (default: the tests' seconds-per-run config)",
    )
    parser.add_argument("--corpus_dir", required=True, help="a prepared corpus (xlnet-jax prepare)")
    parser.add_argument("--out", required=True, help="new directory for both runs and logs")
    parser.add_argument(
        "--reference",
        help="an uninterrupted, finished run of the same config and overrides to compare "
        "against (default: train one in OUT/reference)",
    )
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs in all (default 5)")
    parser.add_argument(
        "--write_kills", type=int, default=1, help="of those, kills during a checkpoint write"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill steps")
    parser.add_argument("--checkpoint_every", type=int, default=2, help="steps between checkpoints")
    parser.add_argument(
        "--step_delay", type=float, default=0.15, help="seconds slept after each step"
    )
    parser.add_argument("--timeout", type=float, default=900, help="total seconds allowed")
    parser.add_argument(
        "--num_cpu_devices", type=int, default=None, help="simulated CPU devices per run"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="config override"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.write_kills <= args.kills:
        parser.error("--write_kills must be between 1 and --kills")
    return args


class Runner:
    """Starts `xlnet-jax train` subprocesses within one deadline."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.deadline = time.time() + args.timeout
        self.process: subprocess.Popen | None = None

    def remaining(self) -> float:
        left = self.deadline - time.time()
        if left <= 0:
            raise Timeout(f"timed out after {self.args.timeout:.0f} s")
        return left

    def start(self, workdir: pathlib.Path, step_delay: float) -> subprocess.Popen:
        """Starts training in `workdir`; output is appended to WORKDIR.log."""
        command = [
            sys.executable, str(REPO / "scripts" / "slow_steps.py"), str(step_delay), "train",
            "--config", self.args.config, "--workdir", str(workdir),
            f"--config.corpus_dir={self.args.corpus_dir}",
            f"--config.checkpoint_every={self.args.checkpoint_every}",
            *(f"--config.{item}" for item in self.args.set),
        ]  # fmt: skip
        if self.args.num_cpu_devices:
            command.append(f"--num_cpu_devices={self.args.num_cpu_devices}")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with open(f"{workdir}.log", "ab") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
            )
        return self.process

    def finish(self, workdir: pathlib.Path) -> None:
        """Waits for the running process to end; it must exit 0."""
        try:
            code = self.process.wait(timeout=self.remaining())
        except subprocess.TimeoutExpired:
            raise Timeout(f"timed out after {self.args.timeout:.0f} s") from None
        if code != 0:
            raise RuntimeError(f"training in {workdir} exited {code}:\n{log_tail(workdir)}")

    def stop(self) -> None:
        """Kills the running process, if any (on a timeout or an error)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def log_tail(workdir: pathlib.Path, lines: int = 20) -> str:
    text = pathlib.Path(f"{workdir}.log").read_text(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def finalised_steps(workdir: pathlib.Path) -> list[int]:
    """Checkpoint steps on disk that orbax finalised (renamed from their tmp directory)."""
    directory = workdir / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def unfinished_writes(workdir: pathlib.Path) -> dict[str, tuple[int, int]]:
    """orbax's unfinished save directories, by name, with (inode, mtime) to tell them apart.

    orbax removes a leftover directory before it saves that step again, so a directory that
    a kill leaves is new even where an earlier kill left one of the same name.
    """
    directory = workdir / "checkpoints"
    found = {}
    for path in directory.glob(f"*{TMP_SUFFIX}*") if directory.is_dir() else []:
        try:
            stat = path.stat()
        except FileNotFoundError:  # finalised (renamed) between the listing and the stat
            continue
        found[path.name] = (stat.st_ino, stat.st_mtime_ns)
    return found


class MetricsTail:
    """The steps that one run appends to metrics.jsonl (earlier runs' lines are skipped).

    A resumed run first rewrites the file without the records past its checkpoint (a new
    inode): the tail then reads it from the start. What it keeps are steps at or before
    the resume point, below any step a kill waits for.
    """

    def __init__(self, workdir: pathlib.Path):
        self.path = workdir / "metrics.jsonl"
        self.offset, self.inode = 0, None
        if self.path.exists():
            stat = self.path.stat()
            self.offset, self.inode = stat.st_size, stat.st_ino
        self.newest = None

    def poll(self) -> int | None:
        """The newest train step this run has logged so far."""
        if not self.path.exists():
            return self.newest
        with open(self.path, "rb") as f:
            inode = os.fstat(f.fileno()).st_ino
            if inode != self.inode:
                self.offset, self.inode = 0, inode
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line an earlier kill cut short
                continue
            if record.get("kind") == "train":
                self.newest = record["step"]
        return self.newest


def kill_when(runner: Runner, workdir: pathlib.Path, kill: Kill, condition) -> None:
    """Polls `condition` every 2 ms and SIGKILLs the run as soon as it holds."""
    process = runner.process
    while not condition():
        runner.remaining()
        if process.poll() is not None:
            raise RuntimeError(
                f"the run ended (exit {process.returncode}) before the kill {kill.target}:\n"
                + log_tail(workdir)
            )
        time.sleep(POLL_S)
    process.send_signal(signal.SIGKILL)
    process.wait()


def plan(num_steps: int, args: argparse.Namespace) -> list[Kill]:
    """Seeded random kill points: steps after which to kill, some marked as write kills."""
    rng = random.Random(args.seed)
    steps = sorted(rng.randrange(1, num_steps) for _ in range(args.kills))
    during_write = set(rng.sample(range(args.kills), args.write_kills))
    return [Kill(i in during_write, step) for i, step in enumerate(steps)]


def inject(runner: Runner, workdir: pathlib.Path, kill: Kill, num_steps: int) -> None:
    """Runs from the newest checkpoint and lands `kill` at its planned point (or later).

    A planned step at or before the resume point moves just past it, so every run makes
    progress; a write kill waits for the first save at or after its planned step.
    """
    every = runner.args.checkpoint_every
    kill.step = max(kill.step, max(finalised_steps(workdir), default=0) + 1)
    tail, left_before = MetricsTail(workdir), unfinished_writes(workdir).items()
    runner.start(workdir, runner.args.step_delay)
    if kill.during_write:
        kill.step = min(-(-kill.step // every) * every, num_steps)
        prefix = f"{kill.step}{TMP_SUFFIX}"

        def writing() -> bool:
            new = unfinished_writes(workdir).items() - left_before
            return any(name.startswith(prefix) for name, _ in new)

        kill_when(runner, workdir, kill, writing)
    else:
        kill.step = min(kill.step, num_steps - 1)
        kill_when(runner, workdir, kill, lambda: (tail.poll() or 0) >= kill.step)
    kill.landed_after_step = tail.poll()
    left_now = unfinished_writes(workdir).items()
    kill.unfinished_write = ", ".join(sorted(name for name, _ in left_now - left_before))
    kill.newest_checkpoint = max(finalised_steps(workdir), default=0)


def resumed_from(workdir: pathlib.Path, log_offset: int) -> int | None:
    """Where the run that wrote WORKDIR.log after `log_offset` started (0 for a new run)."""
    text = pathlib.Path(f"{workdir}.log").read_bytes()[log_offset:].decode(errors="replace")
    match = re.search(r"Resumed from step (\d+)", text)
    if match:
        return int(match.group(1))
    return 0 if re.search(r"Starting (a new run|from step 0)", text) else None


def bits(value: float) -> bytes:
    """A float's exact bytes (NaN-safe equality)."""
    import numpy as np

    return np.float64(value).tobytes()


def divergences(reference: pathlib.Path, faulty: pathlib.Path, num_steps: int) -> list[str]:
    """Every step whose logged loss differs, and the final state if any array differs."""
    import jax
    import numpy as np

    from xlnet_jax.checkpoint.reader import read_checkpoint
    from xlnet_jax.training.metrics import read_metrics

    want, got = read_metrics(str(reference)), read_metrics(str(faulty))
    found = [
        f"step {step}: loss {got.get(step, {}).get('loss')!r} != {want[step]['loss']!r}"
        for step in range(1, num_steps + 1)
        if step not in got or bits(got[step]["loss"]) != bits(want[step]["loss"])
    ]
    a, b = read_checkpoint(str(reference), num_steps), read_checkpoint(str(faulty), num_steps)
    for item in ("state", "mems"):
        pairs = zip(jax.tree.leaves(a[item]), jax.tree.leaves(b[item]), strict=True)
        if any(np.asarray(x).tobytes() != np.asarray(y).tobytes() for x, y in pairs):
            found.append(f"final checkpoint: {item} differs")
    return found


def report(kills: list[Kill], found: list[str], num_steps: int) -> bool:
    """Prints the table and the summary; returns whether everything held."""
    print(f"{'kill':<5}{'target':<28}{'landed after':<14}{'unfinished write':<28}"
          f"{'newest ckpt':<13}{'resumed from'}")  # fmt: skip
    for i, kill in enumerate(kills, 1):
        print(
            f"{i:<5}{kill.target:<28}{f'step {kill.landed_after_step}':<14}"
            f"{kill.unfinished_write or '-':<28}{kill.newest_checkpoint!s:<13}"
            f"{kill.resumed_from}"
        )
    survived = sum(
        k.resumed_from is not None and k.resumed_from == k.newest_checkpoint for k in kills
    )
    during_write = sum(bool(k.unfinished_write) for k in kills)
    print(f"kills survived:                 {survived}/{len(kills)}")
    print(f"kills during a checkpoint write: {during_write}")
    print(
        f"divergences:                    {len(found)} (losses of {num_steps} steps, final state)"
    )
    for line in found:
        print(f"  {line}")
    return survived == len(kills) and during_write >= 1 and not found


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"fault_injection: --out {out} is not empty; pass a new directory", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))
    faulty = out / "faulty"
    reference = pathlib.Path(args.reference) if args.reference else out / "reference"
    runner = Runner(args)
    try:
        if not args.reference:
            runner.start(reference, 0.0)
            runner.finish(reference)
        num_steps = max(finalised_steps(reference), default=0)
        if not num_steps:
            raise RuntimeError(f"the reference run {reference} holds no checkpoint")
        kills = plan(num_steps, args)
        for previous, kill in zip([None, *kills], [*kills, None], strict=True):
            log = pathlib.Path(f"{faulty}.log")
            offset = log.stat().st_size if log.exists() else 0
            if kill is None:  # the last run trains to the end
                runner.start(faulty, 0.0)
                runner.finish(faulty)
            else:
                inject(runner, faulty, kill, num_steps)
            if previous is not None:
                previous.resumed_from = resumed_from(faulty, offset)
    except (Timeout, RuntimeError) as e:
        print(f"fault_injection: {e}", file=sys.stderr)
        return 1
    finally:
        runner.stop()
    return 0 if report(kills, divergences(reference, faulty, num_steps), num_steps) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
