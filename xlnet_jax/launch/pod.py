"""`xlnet-jax launch`: create a TPU VM slice, install the project, train (or fine-tune) on it,
stop, delete.

Also `python -m xlnet_jax.launch.pod`. Each subcommand maps its flags to a list of argv
lists (`commands`, `remote`) and runs them (`runner`), or with --dry-run prints them as
shell text (`shell`: a long command one option per line). `train --backend local` runs the
same train command as N processes on this machine (`local`). `run finetune` runs the
finetune command instead (on every worker of a slice, worker 0 alone on a one-host slice,
or as N local processes), under the same restart policy: its rerun resumes from its newest
checkpoint.
"""

import argparse
import contextlib
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from xlnet_jax.errors import ConfigError
from xlnet_jax.hardware import slices
from xlnet_jax.launch import (
    commands,
    emulator,
    job,
    local,
    names,
    remote,
    restarts,
    runner,
    versions,
)

PROG = "xlnet-jax launch"
LOCAL_LOGS = "xlnet-jax-logs"  # the local backend's logs of a gs:// workdir, under the cwd
# How a --backend local job stops, in `stop --help`, the manual and the launcher's first line.
LOCAL_STOP = (
    "Ctrl-C in the launcher's terminal, or `kill PID` of the launcher (its pid is on its first "
    "line): every process saves a checkpoint and stops, and the same command resumes"
)
STOP_GRACE_S = 60  # `stop`'s default wait for a checkpoint before SIGKILL; `run` uses it too
# The program's flags that the launcher sets itself (or owns: its --dry-run prints the
# commands), never passed on; every other flag of `xlnet-jax train` and `finetune` is, as
# declared once in xlnet_jax/run/flags.py (`passed_on`).
LAUNCHER_OWNED = frozenset(
    {"config", "workdir", "distributed", "coordinator_address", "num_processes",
     "process_id", "num_cpu_devices", "dry_run"}
)  # fmt: skip
# `finetune` flags that `launch run finetune` takes and passes on: (dest, its finetune flag).
FINETUNE_FLAGS = (
    ("task_name", "--task_name"),
    ("data_dir", "--data_dir"),
    ("init_from", "--init_from"),
    ("seeds", "--seeds"),
    ("devices_per_seed", "--devices_per_seed"),
    ("random_weights", "--random_weights"),
)
FINETUNE_REQUIRED = ("task_name", "data_dir", "init_from")


@dataclasses.dataclass(frozen=True)
class PassedOn:
    """A flag of `xlnet-jax PROGRAM` that `launch` takes and passes on as the program spells
    it: its absl name, whether it is a switch (a bool: passed bare), its help, and the
    programs that have it."""

    name: str
    switch: bool
    help: str
    programs: tuple[str, ...]


@functools.cache
def passed_on() -> tuple[PassedOn, ...]:
    """Every flag of `train` and `finetune` (run/flags.py, the one declaration, which the
    command line parses too) but LAUNCHER_OWNED's, in declaration order, train's first.
    run/flags.py imports absl and ml_collections only: the supervising parent stays light.
    """
    from absl import flags

    from xlnet_jax.run import flags as declared

    found: dict[str, PassedOn] = {}
    for program, define in (
        ("train", declared.define_train),
        ("finetune", declared.define_finetune),
    ):
        values = flags.FlagValues()
        define(values)
        for name in values:
            if name in LAUNCHER_OWNED:
                continue
            flag = values[name]
            if name in found:
                found[name] = dataclasses.replace(
                    found[name], programs=(*found[name].programs, program)
                )
            else:
                switch = isinstance(flag, flags.BooleanFlag)
                found[name] = PassedOn(name, switch, flag.help, (program,))
    return tuple(found.values())


# The switches `launch train` and `launch run` pass on, spelled as the trainer spells them
# (names.dashed leaves them so).
TRAIN_SWITCHES = tuple(f"--{f.name}" for f in passed_on() if f.switch and "train" in f.programs)


class _PassOn(argparse.Action):
    """Records a passed-on flag in `passed_on` (name -> value), in the order given."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = dict(getattr(namespace, "passed_on", None) or {})
        given.pop(self.dest, None)
        given[self.dest] = True if self.nargs == 0 else values
        namespace.passed_on = given


def _passed_on_options(
    parser: argparse.ArgumentParser, programs: Sequence[str], declared: Sequence[str] = ()
) -> None:
    """`programs`' flags (passed_on) as options of `parser`, both spellings (--change-schedule,
    --change_schedule), except the `declared` ones (`run finetune`'s own group)."""
    which = " or ".join(f"`xlnet-jax {p}`" for p in programs)
    group = parser.add_argument_group(f"passed on to {which} as it spells them (see its --help)")
    parser.set_defaults(passed_on={})
    for flag in passed_on():
        if flag.name in declared or not set(flag.programs) & set(programs):
            continue
        spellings = dict.fromkeys([f"--{flag.name.replace('_', '-')}", f"--{flag.name}"])
        only = "" if len(programs) == 1 or len(flag.programs) == 2 else f" [{flag.programs[0]}]"
        kwargs = (
            {"nargs": 0}
            if flag.switch
            else {"metavar": flag.name.upper(), "type": names.not_an_option}
        )
        group.add_argument(
            *spellings, dest=flag.name, action=_PassOn, default=argparse.SUPPRESS,
            help=flag.help.replace("%", "%%") + only, **kwargs,
        )  # fmt: skip


ONE_SLICE = "fine-tuning runs on one slice (a multislice run is not built for it)"
ONE_PROCESS_SEEDS = (
    "--seeds runs its seeds in one process, one after another or side by side on its devices "
    "(several processes share one seed's run only)"
)

EXAMPLES = """\
a v3-32 slice (4 workers), start to end:
  xlnet-jax launch create --name xl --zone europe-west4-a --accelerator-type v3-32
  xlnet-jax launch setup  --name xl --zone europe-west4-a
  xlnet-jax launch train  --name xl --zone europe-west4-a --config configs/base.py \\
      --workdir gs://my-bucket/xlnet-base --config.num_train_steps=100000
  xlnet-jax launch status --name xl --zone europe-west4-a
  xlnet-jax launch logs   --name xl --zone europe-west4-a --worker 0 --follow
  xlnet-jax launch stop   --name xl --zone europe-west4-a
  xlnet-jax launch delete --name xl --zone europe-west4-a

2 processes x 2 simulated CPU devices on this machine:
  xlnet-jax launch train --backend local --num-processes 2 --num-cpu-devices 2 \\
      --config configs/tiny.py --workdir workdirs/tiny

fine-tune on a slice (every worker runs `xlnet-jax finetune --distributed` and reads its
share of each batch; on a one-host slice such as v3-8, worker 0 alone), restarted and
resumed from its newest checkpoint after a preemption:
  xlnet-jax launch run finetune --name ft --zone europe-west4-a --accelerator-type v4-16 \\
      --config configs/finetune/glue.py --workdir gs://my-bucket/mnli \\
      --task-name mnli --data-dir gs://my-bucket/glue/MNLI --init-from gs://my-bucket/xlnet-base

Add --dry-run to any subcommand to print its commands instead of running them. Every flag
also takes underscores, as the other commands spell theirs (--num_cpu_devices, --dry_run).
"""

Commands = list[list[str]]


def _subcommand(
    sub: argparse._SubParsersAction,
    name: str,
    summary: str,
    description: str,
    usage: str | None = None,
) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name,
        help=summary,
        usage=usage,
        description=f"{summary}.\n\n{description}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the commands (a long one with one option per line); run nothing",
    )
    return parser


def _tpu_options(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "--name", type=names.tpu_name, required=required, help="TPU VM (and queued resource) name"
    )
    parser.add_argument(
        "--zone", type=names.zone, required=required, help="GCE zone, e.g. europe-west4-a"
    )
    parser.add_argument(
        "--project", type=names.project, help="GCP project (default: gcloud's configured one)"
    )


def _queued_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--queued", action="store_true", help=f"{what} a queued resource")


def _queued_ssh_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queued",
        action="store_true",
        help="reach the workers through the queued resource, on every node (--node=all; "
        "needed for a multislice)",
    )


def _slice_options(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """The flags of `create` (and `run`) that describe the slice."""
    parser.add_argument(
        "--accelerator-type",
        metavar="TYPE",
        type=names.accelerator_type,
        required=required,
        help="e.g. v3-32, v4-16, v5litepod-16, v5p-32, v6e-8",
    )
    parser.add_argument(
        "--runtime-version",
        metavar="VERSION",
        type=names.runtime_version,
        help="TPU software version (default: by generation: v2/v3/v4 tpu-ubuntu2204-base, "
        "v5litepod/v5e v2-alpha-tpuv5-lite, v5p v2-alpha-tpuv5, v6e v2-alpha-tpuv6e)",
    )
    parser.add_argument(
        "--queued", action="store_true", help="through a queued resource (its node: same name)"
    )
    parser.add_argument(
        "--node-count",
        type=names.positive_int,
        metavar="N",
        help="multislice: N slices of --accelerator-type (needs --queued); the TPU runtime "
        "joins them for jax.distributed; pass --config.num_slices=N to train",
    )
    parser.add_argument(
        "--node-prefix", type=names.tpu_name, metavar="PREFIX", help="multislice node names"
    )
    capacity = parser.add_mutually_exclusive_group()
    capacity.add_argument("--spot", action="store_true", help="Spot capacity (preemptible)")
    capacity.add_argument(
        "--preemptible", action="store_true", help="legacy preemptible TPU VM; prefer --spot"
    )
    parser.add_argument(
        "--reserved", action="store_true", help="use the project's reserved capacity"
    )
    parser.add_argument(
        "--service-account",
        type=names.service_account,
        metavar="EMAIL",
        help="the workers' identity; it needs write access to the workdir's bucket",
    )
    parser.add_argument("--scopes", type=names.scopes, help="its OAuth scopes, e.g. cloud-platform")
    parser.add_argument("--network", type=names.resource, help="VPC network")
    parser.add_argument("--subnetwork", type=names.resource, help="VPC subnetwork")
    parser.add_argument(
        "--internal-ips", action="store_true", help="no external IPs (needs Private Google Access)"
    )
    parser.add_argument("--labels", type=names.labels, metavar="K=V,...", help="GCE labels")


def _source_options(setup: argparse.ArgumentParser) -> None:
    """Where `setup` (and `run`) take the project from, and the workers' Python."""
    source = setup.add_mutually_exclusive_group()
    source.add_argument(
        "--source",
        metavar="DIR",
        type=names.local_path,
        default=".",
        help="local git checkout to ship (default: %(default)s)",
    )
    source.add_argument(
        "--repo",
        metavar="URL",
        type=names.not_an_option,
        help="git URL for the workers to clone instead",
    )
    setup.add_argument(
        "--ref", metavar="REF", type=names.not_an_option, help="branch, tag or commit of --repo"
    )
    setup.add_argument(
        "--allow-dirty",
        action="store_true",
        help="ship HEAD although --source has uncommitted changes (they stay behind; a warning "
        "names them); without it such a tree is refused",
    )
    setup.add_argument(
        "--tarball",
        metavar="PATH",
        type=names.local_path,
        default="/tmp/xlnet-jax-src.tar.gz",
        help="where to write the source tarball locally (default: %(default)s)",
    )
    setup.add_argument(
        "--python",
        type=names.python,
        default="python3.11",
        help="worker interpreter for the venv (default: %(default)s)",
    )


def _local_options(parser: argparse.ArgumentParser) -> None:
    """The flags of `train` and `run` with --backend local."""
    here = parser.add_argument_group("--backend local")
    here.add_argument(
        "--num-processes",
        type=names.positive_int,
        metavar="N",
        help="processes to run (default: 2; `run finetune`: 1)",
    )
    here.add_argument(
        "--num-cpu-devices",
        type=names.positive_int,
        metavar="K",
        help="CPU devices per process (default: 1; one `run finetune` process: JAX's count)",
    )
    here.add_argument("--port", type=names.port, help="coordinator port (default: a free one)")
    here.add_argument(
        "--timeout",
        type=names.positive_int,
        metavar="SECONDS",
        help="seconds before all are stopped, per start of the job (default: none)",
    )
    here.add_argument(
        "--log-dir",
        metavar="DIR",
        type=names.local_path,
        help="where process i writes process_{i}.log (default: WORKDIR/logs, or for a gs:// "
        f"WORKDIR {LOCAL_LOGS}/BUCKET/PATH)",
    )


def _restart_options(parser: argparse.ArgumentParser, default: int) -> None:
    """The restart policy's flags (restarts.py): how many, after what pause."""
    parser.add_argument(
        "--max-restarts",
        type=names.non_negative_int,
        default=default,
        metavar="N",
        help="starts of the job again after a lost slice, a lost process, a killed trainer or "
        "storage that kept failing, before giving up (default: %(default)s)",
    )
    parser.add_argument(
        "--restart-pause",
        type=names.non_negative_int,
        metavar="SECONDS",
        help=f"pause before each restart (default: {restarts.STORAGE_PAUSE_S:g} after storage "
        f"failures, {restarts.LOST_PROCESS_PAUSE_S:g} after a lost process or killed trainer)",
    )
    parser.add_argument(
        "--hang-timeout",
        type=names.positive_int,
        default=job.HANG_S,
        metavar="SECONDS",
        help="a process whose training loop finished no step, evaluation or save for this "
        "long (from its start: restore and compile count) is hung: the job is stopped "
        "everywhere and restarted, as for a lost process (default: %(default)s)",
    )


def _finetune_options(parser: argparse.ArgumentParser) -> None:
    """The flags of `finetune` that `run finetune` passes on (FINETUNE_FLAGS), as they are."""
    here = parser.add_argument_group(
        "PROGRAM finetune (passed on to `xlnet-jax finetune`; see its --help)"
    )
    here.add_argument(
        "--task-name", metavar="TASK", type=names.not_an_option, help="e.g. mnli, race, squad"
    )
    here.add_argument(
        "--data-dir",
        metavar="DIR",
        type=names.not_an_option,
        help="the task's files; on a TPU VM a gs:// path (or one on the worker)",
    )
    here.add_argument(
        "--init-from",
        metavar="DIR",
        type=names.not_an_option,
        help="the pretrained model: a pretraining workdir or an HF XLNet directory",
    )
    here.add_argument(
        "--seeds",
        metavar="N",
        type=names.positive_int,
        help="fine-tune N times on the one host, one seed after another (medians in "
        "WORKDIR/seeds.json)",
    )
    here.add_argument(
        "--devices-per-seed",
        metavar="D",
        type=names.positive_int,
        help="with --seeds: run the seeds side by side, each on its own D of the host's "
        "devices (e.g. 4 seeds on a v3-8's 8 cores: 2)",
    )
    here.add_argument(
        "--random-weights",
        action="store_true",
        default=None,
        help="start from random weights of --init-from's shape: the baseline",
    )


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each subcommand's parser, by name (for their errors)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run xlnet-jax on a Cloud TPU VM slice (through gcloud) or locally.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    create = _subcommand(
        sub,
        "create",
        "create a TPU VM slice",
        "Runs `gcloud compute tpus tpu-vm create`, or with --queued\n"
        "`gcloud compute tpus queued-resources create` (its node gets the same name).",
    )
    _tpu_options(create)
    _slice_options(create)

    setup = _subcommand(
        sub,
        "setup",
        "install the project on every worker",
        f"Ships the committed tree (git archive HEAD of --source) with scp, or clones --repo,\n"
        f"into {remote.PROJECT_DIR} on every worker, then `pip install -c CONSTRAINTS -e .[tpu]`\n"
        f"into the venv {remote.VENV} (created once per --python, installed from apt if\n"
        f"missing). CONSTRAINTS is {remote.constraints_file('python3.XY')}, the exact versions\n"
        f"CI tests on for that Python, so every worker, recreated or not, gets the same ones.\n"
        f"Uncommitted changes are not shipped: a tree with any is refused, naming them,\n"
        f"unless --allow-dirty. Rerun after every commit.",
    )
    _tpu_options(setup)
    _source_options(setup)
    _queued_ssh_option(setup)

    train = _subcommand(
        sub,
        "train",
        "start training",
        "Runs `xlnet-jax train --config CONFIG --workdir WORKDIR [--config.FIELD=VALUE ...]`;\n"
        "any --config.FIELD=VALUE argument is passed on as a config override. A non-empty\n"
        "workdir resumes.\n\n"
        "--backend tpu (default): starts `train --distributed` in the background on every\n"
        f"worker; each logs to {remote.LOG_FILE}.\n"
        "WORKDIR must be on gs:// or on storage that every worker shares.\n\n"
        "--backend local: runs --num-processes processes here, joined through a coordinator\n"
        "on 127.0.0.1, each with --num-cpu-devices CPU devices (JAX_PLATFORMS=cpu unless set)\n"
        "and logging to --log-dir/process_{i}.log; waits for all of them. WORKDIR may be on\n"
        "gs:// (a local emulator: `launch emulator`). If one fails the others are stopped;\n"
        "with --max-restarts the job starts again as `launch run` would, else the failed\n"
        "process's exit code is returned.",
        usage="%(prog)s --config CONFIG --workdir WORKDIR [--config.FIELD=VALUE ...]\n"
        "         [--backend tpu] --name NAME --zone ZONE [--project PROJECT] [--dry-run]\n"
        "   or: %(prog)s --config CONFIG --workdir WORKDIR [--config.FIELD=VALUE ...]\n"
        "         --backend local [--num-processes N] [--num-cpu-devices K] [--port PORT]\n"
        "         [--timeout SECONDS] [--log-dir DIR] [--max-restarts N] [--dry-run]",
    )
    train.add_argument("--config", required=True, help="config file, e.g. configs/base.py")
    train.add_argument("--workdir", required=True, help="checkpoints, logs, metrics")
    train.add_argument(
        "--backend", choices=["tpu", "local"], default="tpu", help="(default: %(default)s)"
    )
    tpu = train.add_argument_group("--backend tpu")
    _tpu_options(tpu, required=False)
    tpu.add_argument(
        "--queued",
        action="store_true",
        default=None,
        help="reach the workers through the queued resource (--node=all; multislice)",
    )
    _local_options(train)
    _restart_options(train, default=0)
    _passed_on_options(train, ["train"])
    train.set_defaults(program="train")

    status = _subcommand(
        sub,
        "status",
        "show the slice and whether each worker is training",
        "Describes the TPU VM (or with --queued the queued resource), then prints per worker\n"
        "whether `xlnet-jax train` runs and the last line of its log.",
    )
    _tpu_options(status)
    _queued_option(status, "describe (and reach the workers through)")

    logs = _subcommand(sub, "logs", "print a worker's train log", f"Tails {remote.LOG_FILE}.")
    _tpu_options(logs)
    _queued_ssh_option(logs)
    logs.add_argument(
        "--worker",
        metavar="W",
        type=names.worker,
        default="0",
        help="index, or all (default: %(default)s)",
    )
    logs.add_argument(
        "--lines", metavar="N", type=names.positive_int, default=100, help="(default: %(default)s)"
    )
    logs.add_argument("--follow", action="store_true", help="keep printing (tail -F)")

    stop = _subcommand(
        sub,
        "stop",
        "stop training on every worker",
        "Sends SIGTERM to the trainer's process group on each worker (the trainer and\n"
        "everything it started), waits up to --grace seconds (JAX takes SIGTERM as a\n"
        "preemption notice, so the trainer may checkpoint), then SIGKILLs the group. `launch\n"
        "run` reads the stop as the user's: it ends the job rather than restart it.\n\n"
        f"A --backend local job has no `stop`: {LOCAL_STOP}.",
    )
    _tpu_options(stop)
    _queued_ssh_option(stop)
    stop.add_argument(
        "--grace",
        metavar="SECONDS",
        type=names.non_negative_int,
        default=STOP_GRACE_S,
        help="seconds before SIGKILL (default: %(default)s)",
    )

    delete = _subcommand(
        sub,
        "delete",
        "delete the TPU VM slice",
        "Deletes the TPU VM, or with --queued the queued resource and its node.",
    )
    _tpu_options(delete)
    _queued_option(delete, "delete")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    run = _subcommand(
        sub,
        "run",
        "create, set up, train (or fine-tune) and watch; recreate and resume after preemptions",
        "Creates the slice unless it is up, runs `setup` and `train`, then checks the slice\n"
        "every --poll seconds. If gcloud reports it lost (preempted, terminated, suspended),\n"
        "deletes and recreates it, sets it up and trains again, which resumes from the\n"
        "newest checkpoint in WORKDIR (on gs://), up to --max-restarts times. It reads every\n"
        "worker's outcome. A trainer that stopped because object storage kept failing (exit\n"
        "code 4), because the job lost a process (5: a host died or hung), because a signal\n"
        "stopped it before its last step (6: a preemption notice), that was killed by a\n"
        "signal (128+N), or whose loop made no progress for --hang-timeout seconds, is\n"
        "stopped on every worker and started again after --restart-pause, counted among the\n"
        "restarts. The first worker that fails otherwise (1, 2: its own error) ends the job\n"
        "with its code, naming it; so does `launch stop`. Exit code 0 once every worker\n"
        "reached the last step; 1 once it gives up.\n\n"
        "--backend local: the same job as `train --backend local`, under the same restart\n"
        "policy (no slice, nothing shipped); WORKDIR may be local or on gs://.\n\n"
        "What is shipped: the committed tree, `git archive HEAD` of --source (default: the\n"
        "current directory), or a clone of --repo at --ref. Uncommitted changes (an edited\n"
        "or new config file too) are not: a tree with any is refused, naming them, unless\n"
        "--allow-dirty (then a warning names what stays behind).\n\n"
        "PROGRAM finetune runs `xlnet-jax finetune` instead of `train`, with its --task-name,\n"
        "--data-dir, --init-from, --seeds, --devices-per-seed and --random-weights and any\n"
        "--config.FIELD=VALUE\n"
        "passed on, under the same restart policy: the same command started again resumes\n"
        "from the newest checkpoint in WORKDIR, bit for bit (SIGTERM saves and exits 6; its\n"
        "own errors, exit 1 or 2, are not retried). On a slice of several hosts every worker\n"
        "runs it (--distributed), each reading its share of every batch, and process 0 writes\n"
        "the results; on a one-host slice (v3-8, v4-8, v5litepod-8, v5p-8, v6e-8) worker 0\n"
        "runs it alone; locally, --num-processes N (default 1). A multislice, and --seeds\n"
        "with several processes, are refused.",
        usage="%(prog)s [PROGRAM] --name NAME --zone ZONE --accelerator-type TYPE\n"
        "         --config CONFIG --workdir gs://... [create flags] [setup flags]\n"
        "         [finetune flags] [--config.FIELD=VALUE ...]\n"
        "   or: %(prog)s [PROGRAM] --backend local --config CONFIG --workdir WORKDIR\n"
        "         [--num-processes N] [--num-cpu-devices K] [--log-dir DIR] [--max-restarts N]\n"
        "         [finetune flags] [--config.FIELD=...]",
    )
    run.add_argument(
        "program",
        nargs="?",
        choices=["train", "finetune"],
        default="train",
        metavar="PROGRAM",
        help="train (pretraining, the default) or finetune",
    )
    run.add_argument(
        "--backend", choices=["tpu", "local"], default="tpu", help="(default: %(default)s)"
    )
    _tpu_options(run, required=False)
    _slice_options(run, required=False)
    _source_options(run)
    _local_options(run)
    run.add_argument("--config", required=True, help="config file, e.g. configs/base.py")
    run.add_argument("--workdir", required=True, help="gs://BUCKET/PATH: survives the slice")
    _finetune_options(run)
    _passed_on_options(run, ["train", "finetune"], [dest for dest, _ in FINETUNE_FLAGS])
    _restart_options(run, default=5)
    run.add_argument(
        "--poll",
        type=names.positive_int,
        default=60,
        metavar="SECONDS",
        help="seconds between checks of the slice (default: %(default)s)",
    )

    emulate = sub.add_parser(
        "emulator",
        help="run a local GCS emulator, to rehearse a pod on gs:// on this machine",
        description=emulator.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    emulator.add_arguments(emulate)

    return parser, sub.choices


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parses and cross-checks the flags; exits through argparse with a message on error."""
    parser, subparsers = build_parser()
    args, extras = parser.parse_known_args(names.dashed(argv, TRAIN_SWITCHES))
    sub = subparsers[args.command]
    if args.command == "run":
        _check_run_backend(args, sub)
    if args.command == "create" or (args.command == "run" and args.backend == "tpu"):
        _check_slice(args, sub)
    if args.command in ("setup", "run") and args.ref is not None and args.repo is None:
        sub.error("argument --ref: needs --repo")
    if args.command not in ("train", "run"):
        if extras:
            sub.error(f"unrecognized arguments: {' '.join(extras)}")
        return args
    for extra in extras:
        try:
            names.config_override(extra)
        except argparse.ArgumentTypeError as e:
            sub.error(f"unrecognized argument: {e}")
    args.overrides = extras
    if args.command == "run":  # its backends' flags were checked above
        if args.backend == "tpu" and not args.workdir.startswith("gs://"):
            sub.error("argument --workdir: must be on gs://, to outlive a preempted slice")
        _check_program(args, sub)
        return args
    options = {
        "tpu": ["name", "zone", "project", "queued"],
        "local": _LOCAL_DESTS,
    }
    for backend, dests in options.items():
        for dest in dests:
            if backend != args.backend and getattr(args, dest) is not None:
                sub.error(f"argument --{dest.replace('_', '-')}: only with --backend {backend}")
    if args.backend == "tpu":
        for dest in ["name", "zone"]:
            if getattr(args, dest) is None:
                sub.error(f"argument --{dest}: required with --backend tpu")
    return args


_LOCAL_DESTS = ["num_processes", "num_cpu_devices", "port", "timeout", "log_dir"]


def _check_run_backend(args: argparse.Namespace, sub: argparse.ArgumentParser) -> None:
    """`run`: the slice's flags go with --backend tpu only, the local ones with local only."""
    if args.backend == "local":
        for dest in ["name", "zone", "project", "accelerator_type", "node_count", "repo"]:
            if getattr(args, dest) is not None:
                sub.error(f"argument --{dest.replace('_', '-')}: only with --backend tpu")
        return
    for dest in _LOCAL_DESTS:
        if getattr(args, dest) is not None:
            sub.error(f"argument --{dest.replace('_', '-')}: only with --backend local")
    for dest in ["name", "zone", "accelerator_type"]:
        if getattr(args, dest) is None:
            sub.error(f"argument --{dest.replace('_', '-')}: required with --backend tpu")


def _check_program(args: argparse.Namespace, sub: argparse.ArgumentParser) -> None:
    """`run`: each program's own flags go with it only; what `finetune` does not run (a
    multislice, --seeds over several processes) is refused in one line."""
    given = [dest for dest, _ in FINETUNE_FLAGS if getattr(args, dest) is not None]
    programs = {flag.name: flag.programs for flag in passed_on()}
    for name in [*given, *args.passed_on]:
        if args.program not in programs[name]:
            sub.error(f"argument --{name.replace('_', '-')}: only with PROGRAM {programs[name][0]}")
    if args.program == "train":
        return
    for dest in FINETUNE_REQUIRED:
        if dest not in given:
            sub.error(f"argument --{dest.replace('_', '-')}: required with PROGRAM finetune")
    seeds = (args.seeds or 1) > 1
    if args.backend == "local":
        processes = args.num_processes or 1
        if args.port is not None and processes == 1:
            sub.error("argument --port: one fine-tuning process joins no coordinator")
        if seeds and processes > 1:
            _refuse(
                f"--seeds {args.seeds} with --num-processes {processes}: {ONE_PROCESS_SEEDS}; "
                "drop one of them"
            )
        return
    if args.node_count and args.node_count > 1:
        _refuse(f"--node-count {args.node_count}: {ONE_SLICE}; drop --node-count")
    if seeds and _hosts(args.accelerator_type) != 1:
        _refuse(
            f"--seeds {args.seeds} on --accelerator-type {args.accelerator_type}, a slice of "
            f"several hosts: {ONE_PROCESS_SEEDS}; use a one-host slice or drop --seeds"
        )


def _hosts(accelerator_type: str) -> int | None:
    """The slice's host count; None for a generation whose hosts are unknown."""
    try:
        return slices.parse_slice(accelerator_type).hosts
    except ConfigError:
        return None


def _refuse(message: str) -> None:
    """Ends the parse with one line (no usage: the flags are right, the request is not)."""
    print(f"{PROG} run: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_slice(args: argparse.Namespace, sub: argparse.ArgumentParser) -> None:
    """Cross-checks the slice flags and fills in the software version from the generation."""
    if args.queued and args.preemptible:
        sub.error("argument --preemptible: not for --queued; use --spot")
    if args.node_count and args.node_count > 1 and not args.queued:
        sub.error("argument --node-count: a multislice needs --queued")
    if args.node_prefix and not args.node_count:
        sub.error("argument --node-prefix: needs --node-count")
    if args.runtime_version is None:
        try:
            args.runtime_version = versions.runtime_version_for(args.accelerator_type)
        except argparse.ArgumentTypeError as e:
            sub.error(f"argument --accelerator-type: {e}")


def _slice(args: argparse.Namespace) -> commands.Slice:
    return commands.Slice(
        accelerator_type=args.accelerator_type,
        runtime_version=args.runtime_version,
        queued=args.queued,
        preemptible=args.preemptible,
        spot=args.spot,
        node_count=args.node_count,
        node_prefix=args.node_prefix,
        service_account=args.service_account,
        scopes=args.scopes,
        network=args.network,
        subnetwork=args.subnetwork,
        internal_ips=args.internal_ips,
        reserved=args.reserved,
        labels=args.labels,
    )


def _where(args: argparse.Namespace) -> tuple[str, str, str | None]:
    return args.name, args.zone, args.project


def _create(args: argparse.Namespace) -> Commands:
    return [commands.create(*_where(args), _slice(args))]


def _setup(args: argparse.Namespace) -> Commands:
    queued = bool(args.queued)
    if args.repo is not None:
        script = remote.setup_from_git(args.python, args.repo, args.ref)
        return [commands.ssh(*_where(args), "all", script, queued)]
    tarball = os.path.abspath(args.tarball)  # `git -C SOURCE` would resolve it in SOURCE.
    return [
        commands.source_tarball(args.source, tarball),
        commands.scp_to_workers(*_where(args), tarball, queued),
        commands.ssh(*_where(args), "all", remote.setup_from_tarball(args.python), queued),
    ]


def _program_flags(args: argparse.Namespace) -> list[str]:
    """The program's flags after --config and --workdir: `finetune`'s own flags first (as
    `--task_name=VALUE`...), then the overrides and switches in the order given."""
    own = FINETUNE_FLAGS if args.program == "finetune" else (("init_from", "--init_from"),)
    named = [
        flag if value is True else f"{flag}={value}"
        for dest, flag in own
        if (value := getattr(args, dest, None)) is not None
    ]
    named += [
        f"--{name}" if value is True else f"--{name}={value}"
        for name, value in args.passed_on.items()
    ]
    return [*named, *args.overrides]


def program_args(args: argparse.Namespace, cluster_flags: Sequence[str]) -> list[str]:
    """The xlnet-jax command that `launch train` or `launch run [PROGRAM]` runs, after its
    program name: `train ...` or `finetune ...`."""
    return commands.program_args(
        args.program, cluster_flags, args.config, args.workdir, _program_flags(args)
    )


def _train(args: argparse.Namespace) -> Commands:
    """Starts the program with --distributed on every worker; `finetune` of a one-host
    slice on worker 0 alone, joining no coordinator."""
    if not args.workdir.startswith("gs://"):
        print("warning: --workdir is not on gs://; all workers must share it", file=sys.stderr)
    if args.program == "finetune" and _hosts(args.accelerator_type) == 1:
        script = remote.train(program_args(args, []))
        return [commands.ssh(*_where(args), "0", script, bool(args.queued))]
    script = remote.train(program_args(args, commands.TPU_CLUSTER_FLAGS))
    return [commands.ssh(*_where(args), "all", script, bool(args.queued))]


def _status(args: argparse.Namespace) -> Commands:
    return [
        commands.describe(*_where(args), args.queued),
        commands.ssh(*_where(args), "all", remote.status(), args.queued),
    ]


def _logs(args: argparse.Namespace) -> Commands:
    script = remote.logs(args.lines, args.follow)
    return [commands.ssh(*_where(args), args.worker, script, args.queued)]


def _stop(args: argparse.Namespace) -> Commands:
    return [commands.ssh(*_where(args), "all", remote.stop(args.grace), args.queued)]


def _delete(args: argparse.Namespace) -> Commands:
    return [commands.delete(*_where(args), args.queued, args.yes)]


def _run(args: argparse.Namespace) -> int:
    """`launch run`: with --dry-run, the first attempt's commands; else the watched job."""
    create, setup, train = _create(args), _setup(args), _train(args)
    if args.dry_run:
        return runner.run_commands([*create, *setup, *train], dry_run=True)
    return job.run_job(
        _where(args),
        args.queued,
        create[0],
        setup,
        train[0],
        commands.ssh(*_where(args), "all", remote.stop(STOP_GRACE_S), bool(args.queued)),
        max_restarts=args.max_restarts,
        poll=args.poll,
        hang_s=args.hang_timeout,
        restart_pause=args.restart_pause,
    )


_TPU_SUBCOMMANDS: dict[str, Callable[[argparse.Namespace], Commands]] = {
    "create": _create,
    "setup": _setup,
    "train": _train,
    "status": _status,
    "logs": _logs,
    "stop": _stop,
    "delete": _delete,
}


def local_log_dir(workdir: str) -> Path:
    """Where the local backend's processes log by default: WORKDIR/logs for a local
    workdir; LOCAL_LOGS/BUCKET/PATH under the current directory for a gs:// one."""
    if "://" in workdir:
        return Path(LOCAL_LOGS) / workdir.split("://", 1)[1].strip("/")
    return Path(workdir) / "logs"


def _train_local(args: argparse.Namespace, program: Sequence[str]) -> int:
    """`train --backend local` and `run --backend local`: N processes here (`run finetune`:
    one by default), restarted as `launch run` restarts a pod's job (`train`: only with
    --max-restarts)."""

    def make_commands() -> Commands:
        if args.program == "finetune":
            processes = args.num_processes or 1
            port = (args.port or local.free_port()) if processes > 1 else None
            return commands.local_finetune(
                program, port, processes, args.num_cpu_devices, args.config, args.workdir,
                _program_flags(args),
            )  # fmt: skip
        return commands.local_train(
            program,
            args.port or local.free_port(),
            args.num_processes or 2,
            args.num_cpu_devices or 1,
            args.config,
            args.workdir,
            _program_flags(args),
        )

    if args.dry_run:
        return runner.run_commands(make_commands(), dry_run=True)
    print(f"launch: pid {os.getpid()}; to stop: {LOCAL_STOP}.", file=sys.stderr, flush=True)
    log_dir = Path(args.log_dir) if args.log_dir else local_log_dir(args.workdir)
    try:
        with _stop_signals():
            return local.run_with_restarts(
                make_commands,
                log_dir,
                args.timeout,
                args.max_restarts,
                args.restart_pause,
                hang_s=args.hang_timeout,
            )
    except KeyboardInterrupt:  # between two starts: nothing runs
        print("interrupted between two starts; nothing was running", file=sys.stderr)
        return 130  # the shell's status for Ctrl-C, as `local.run` returns


@contextlib.contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGTERM stops a local job as Ctrl-C does, and SIGINT is Ctrl-C even where a shell
    started the launcher in the background with SIGINT ignored (a script's `&`). Only the
    main thread can set handlers; a launcher called from another thread keeps its process's.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def uncommitted_files(source: str) -> list[str]:
    """The changed and untracked (not ignored) files of the git checkout `source`; [] when it
    is not one (then `git archive` itself says so)."""
    done = subprocess.run(
        ["git", "-C", source, "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
    )
    return [line[3:] for line in done.stdout.splitlines()] if done.returncode == 0 else []


def _check_shipped_tree(args: argparse.Namespace) -> bool:
    """False (after one line naming the files) when setup/run would leave changes behind."""
    changed = uncommitted_files(args.source)
    if not changed:
        return True
    shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    if args.allow_dirty:
        print(
            f"warning: shipping HEAD of {args.source}; its uncommitted changes stay behind: "
            f"{shown}",
            file=sys.stderr,
        )
        return True
    print(
        f"{PROG} {args.command}: error: {args.source} has uncommitted changes that would not be "
        f"shipped (git archive HEAD): {shown}; commit them, or pass --allow-dirty to ship "
        "HEAD without them.",
        file=sys.stderr,
    )
    return False


def main(
    argv: Sequence[str] | None = None, *, local_program: Sequence[str] = local.DEFAULT_PROGRAM
) -> int:
    """Runs `xlnet-jax launch ARGV`; returns the exit code.

    `local_program` is the argv prefix the local backend runs `train ...` with; tests
    swap in a stand-in script.
    """
    try:
        args = _parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:  # argparse: --help, or a usage error.
        return int(exit_.code or 0)
    if args.command == "emulator":
        return emulator.main(args)
    if args.command in ("train", "run") and args.backend == "local":
        return _train_local(args, local_program)
    if args.command in ("setup", "run") and args.repo is None and not _check_shipped_tree(args):
        return 1
    if args.command == "run":
        return _run(args)
    return runner.run_commands(_TPU_SUBCOMMANDS[args.command](args), args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
