"""The flags of `xlnet-jax train` and `xlnet-jax finetune`, declared once (absl): the
command line parses them (cli.py), and `xlnet-jax launch` passes every one on that it does
not set itself (launch/pod.py `passed_on`), so no flag the trainer names can be refused.

Each `define_*` adds a command's flags to a FlagValues. Imports absl and ml_collections
only: a launcher's supervising parent reads them without loading jax.
"""

from absl import flags
from ml_collections import config_flags


def define_config(fv: flags.FlagValues, sys_argv: list[str] | None = None) -> None:
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Config file, e.g. configs/tiny.py; override fields with --config.FIELD=VALUE.",
        flag_values=fv,
        lock_config=True,
        sys_argv=sys_argv,
    )


def define_workdir_command(fv: flags.FlagValues) -> None:
    define_config(fv)
    flags.DEFINE_string(
        "workdir",
        None,
        "Run directory: checkpoints, metrics.jsonl, TensorBoard logs.",
        flag_values=fv,
    )
    define_cluster(fv)


def define_cluster(fv: flags.FlagValues) -> None:
    """The flags that join a multi-process run (train, eval, finetune) and set the devices."""
    flags.DEFINE_bool(
        "distributed",
        False,
        "Call jax.distributed.initialize() with auto-detection (TPU VM pod slices).",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "coordinator_address",
        None,
        "HOST:PORT of process 0, for an explicit multi-process run (e.g. on localhost).",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "num_processes", None, "Processes in an explicit multi-process run.", flag_values=fv
    )
    flags.DEFINE_integer("process_id", None, "This process's index in that run.", flag_values=fv)
    flags.DEFINE_integer(
        "heartbeat_timeout",
        100,
        "Seconds without a heartbeat after which jax.distributed declares a process dead "
        "and stops the others (which would otherwise wait in a collective forever).",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "num_cpu_devices",
        None,
        "Simulated CPU devices per process (tests, pod rehearsal).",
        flag_values=fv,
    )


def define_train(fv: flags.FlagValues) -> None:
    define_workdir_command(fv)
    flags.DEFINE_string(
        "init_from",
        None,
        "Start a new run from these params: an HF XLNet directory, an import-hf output or "
        "another run's workdir (step, optimizer state and memory start fresh).",
        flag_values=fv,
    )
    flags.DEFINE_bool(
        "change_schedule",
        False,
        "On resume, accept new num_train_steps/warmup_steps/learning_rate/min_lr_ratio "
        "(the learning rate then jumps at the resumed step; the log says by how much).",
        flag_values=fv,
    )
    flags.DEFINE_bool(
        "allow_version_change",
        False,
        "Start although this host's package versions differ from those recorded in "
        "WORKDIR/config.json (the record then takes the new ones).",
        flag_values=fv,
    )
    flags.DEFINE_bool(
        "dry_run",
        False,
        "Only check the config and corpus together (every problem, one line each); "
        "compile nothing.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "profile_steps",
        "",
        "START:END traces the steps from START to END with jax.profiler into "
        "WORKDIR/profile/ (TensorBoard's profile plugin, ui.perfetto.dev); e.g. 20:23.",
        flag_values=fv,
    )


def define_finetune(fv: flags.FlagValues) -> None:
    define_config(fv)
    flags.DEFINE_string(
        "task_name",
        None,
        "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, race, classification, "
        "regression or squad (case-insensitive).",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "data_dir",
        None,
        "The task's files, laid out as GLUE, RACE or SQuAD distribute them.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "init_from",
        None,
        "The pretrained model: a pretraining workdir (its newest checkpoint) or an HF XLNet "
        "directory; its tokenizer comes with it.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "workdir", None, "Run directory: checkpoints, metrics, predictions.", flag_values=fv
    )
    flags.DEFINE_integer(
        "seeds",
        1,
        "Fine-tune N times with seeds config.seed .. + N - 1 (WORKDIR/seed_K each), one after "
        "another on this host, and report each result and the median (WORKDIR/seeds.json).",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "devices_per_seed",
        0,
        "With --seeds: run the seeds side by side, each on its own D of this host's devices "
        "(the devices cut into groups of D; a group runs its seeds one after another); a "
        "seed's run is the one it would be alone on D devices. 0: each seed on every device.",
        flag_values=fv,
    )
    flags.DEFINE_bool(
        "random_weights",
        False,
        "Start from random weights of --init_from's shape and tokenizer: the baseline a "
        "pretraining must beat.",
        flag_values=fv,
    )
    define_cluster(fv)
