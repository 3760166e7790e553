"""The `xlnet-jax` command: prepare, train, eval, finetune, compile, launch, import-hf, export-hf.

Each subcommand has its own absl flags (`xlnet-jax COMMAND --help`). Every error is one
line, `xlnet-jax COMMAND: error: ...`, with no traceback. Exit codes: 0 done; 1 a known
error (the `XLNetJaxError` family: bad config, bad corpus, unusable workdir or checkpoint);
2 a wrong command line (unknown command, flag or config field; a missing flag); 3 `compile`:
the step does not fit the topology's memory; 4 object storage kept failing past the retry
budget (rerun when it answers: training resumes; `launch run` does so itself); 6 stopped
by SIGTERM before the last step, after saving a checkpoint (a preemption notice: rerun to
resume; `launch run` restarts it); 130 Ctrl-C (train saves first; see train.py).
"""

import contextlib
import dataclasses
import difflib
import glob
import logging
import os
import sys
import warnings
from collections.abc import Callable

import ml_collections
from absl import flags

from xlnet_jax.errors import (
    STOPPED_EXIT_CODE,
    STORAGE_EXIT_CODE,
    StorageError,
    UsageError,
    XLNetJaxError,
)
from xlnet_jax.run.flags import define_config as _define_config
from xlnet_jax.run.flags import define_finetune as _define_finetune
from xlnet_jax.run.flags import define_train as _define_train
from xlnet_jax.run.flags import define_workdir_command as _define_workdir_command

# The shell's status for a process stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT_CODE = 130

# jax >= 0.11 warns at every lowering of the GPU kernel (deprecation id jax-pallas-triton)
# that Pallas' Triton backend is deprecated: news for this project (docs/gpus.md), nothing a
# user can act on. The command keeps it out of its output; the tests, which call `main` or
# jax directly, still see it.
PALLAS_TRITON_DEPRECATION = "The Pallas Triton backend is deprecated"

USAGE = """usage: xlnet-jax COMMAND [flags]

XLNet pretraining in JAX/Flax.

commands:
{commands}

Run `xlnet-jax COMMAND --help` for a command's flags.
Quick demo:  xlnet-jax prepare --out demo/corpus --vocab_size 2000
             xlnet-jax train --config configs/tiny.py --workdir demo/run \\
                 --config.corpus_dir demo/corpus
"""


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: a one-line summary, its flag definitions and its body."""

    summary: str
    define: Callable[[flags.FlagValues], None]
    main: Callable[[flags.FlagValues, list[str]], int]
    positional: str = ""


def _compilation_cache() -> None:
    """A persistent compilation cache: a resumed or repeated run skips recompiling the step."""
    import jax

    cache = os.environ.get("XLNET_JAX_COMPILATION_CACHE", "~/.cache/xlnet-jax/xla")
    if cache:
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def _setup_jax(fv: flags.FlagValues) -> None:
    """Device count and multi-process initialisation, before any device is touched."""
    import jax

    _compilation_cache()
    if fv.num_cpu_devices:
        jax.config.update("jax_num_cpu_devices", fv.num_cpu_devices)
    if fv.coordinator_address:
        jax.distributed.initialize(
            coordinator_address=fv.coordinator_address,
            num_processes=fv.num_processes,
            process_id=fv.process_id,
            heartbeat_timeout_seconds=fv.heartbeat_timeout,
        )
    elif fv.distributed:
        jax.distributed.initialize(heartbeat_timeout_seconds=fv.heartbeat_timeout)


def _config(fv: flags.FlagValues):
    if fv["config"].value is None:
        where = f" ({fv.workdir} holds no run yet)" if "workdir" in fv and fv.workdir else ""
        raise UsageError(f"--config is required{where}, e.g. --config configs/tiny.py")
    return fv.config


def _with_run_config(rest: list[str], *, reads_run: bool = False) -> list[str]:
    """`rest` with --config pointing at --workdir's saved config, when --config is absent.

    A rerun of train and eval then use the run's own config; --config.FIELD overrides
    still apply on top (config_flags reads them as for any config file). A command that
    reads a run (eval) is told first when --workdir does not exist.
    """
    workdir = None
    for i, arg in enumerate(rest):
        if arg == "--workdir" and i + 1 < len(rest):
            workdir = rest[i + 1]
        elif arg.startswith("--workdir="):
            workdir = arg.split("=", 1)[1]
    if reads_run and workdir:
        from xlnet_jax.run.workdir import require_existing

        require_existing(workdir)
    if any(arg == "--config" or arg.startswith("--config=") for arg in rest):
        return rest
    from xlnet_jax.training import run_config

    if workdir is not None and run_config.load(workdir) is not None:
        return [run_config.config_flag(workdir), *rest]
    override = next((arg for arg in rest if arg.startswith("--config.")), None)
    if override:
        where = f"{workdir} holds no run yet" if workdir else "no --workdir"
        raise UsageError(f"{override.split('=')[0]} needs --config ({where}).")
    return rest


def _require(fv: flags.FlagValues, name: str) -> str:
    value = fv[name].value
    if not value:
        raise UsageError(f"--{name} is required")
    return value


def _train_main(fv: flags.FlagValues, args: list[str]) -> int:
    del args
    config = _config(fv)
    workdir = _require(fv, "workdir")
    _setup_jax(fv)
    from xlnet_jax.training import train

    options = dict(
        change_schedule=fv.change_schedule,
        init_from=fv.init_from,
        allow_version_change=fv.allow_version_change,
    )
    from xlnet_jax.training.profiling import parse_steps

    parse_steps(fv.profile_steps)  # a bad value fails here, before anything compiles
    if fv.dry_run:
        plan = train.plan_run(config, workdir, **options)
        print(
            f"dry run: the config and the corpus {plan.manifest.path} pass every check; "
            "nothing was compiled or written."
        )
        return 0
    with _exit_codes_of_a_stop():
        train.train_and_evaluate(config, workdir, profile_steps=fv.profile_steps, **options)
    return 0


@contextlib.contextmanager
def _exit_codes_of_a_stop():
    """A training or fine-tuning loop stopped by a signal after it saved (and printed how
    to continue) exits 130 after Ctrl-C, STOPPED_EXIT_CODE after SIGTERM: never 0, the
    code of a finished run."""
    from xlnet_jax.training.preemption import SavedAndInterrupted, StoppedBeforeEnd

    try:
        yield
    except SavedAndInterrupted:
        _exit_now(INTERRUPTED_EXIT_CODE)
    except StoppedBeforeEnd:
        _exit_now(STOPPED_EXIT_CODE)


def _define_eval(fv: flags.FlagValues) -> None:
    _define_workdir_command(fv)
    flags.DEFINE_string(
        "init_from",
        None,
        "Score these params instead of WORKDIR's run: an HF XLNet directory, an import-hf "
        "output or a run's workdir (with --config; on --config.corpus_dir's validation "
        "split, which must be prepared with their tokenizer).",
        flag_values=fv,
    )


def _eval_main(fv: flags.FlagValues, args: list[str]) -> int:
    del args
    if fv.init_from and fv.workdir:
        raise UsageError("pass --workdir (a run) or --init_from (params to score), not both")
    if not (fv.init_from or fv.workdir):
        raise UsageError("--workdir (a run) or --init_from (params to score) is required")
    config = _config(fv)
    _setup_jax(fv)
    from xlnet_jax.training import evaluate

    result = evaluate.evaluate_run(config, fv.workdir, fv.init_from)
    spread = (
        f" ± {result['loss_stderr']:.4f} (standard error over {fv.config.eval_steps} batches)"
        if "loss_stderr" in result
        else " (one batch: no standard error; raise --config.eval_steps for one)"
    )
    recorded = "" if result["recorded"] else " (not recorded in any metrics.jsonl)"
    print(
        f"{result['scored']} on the validation split of {result['corpus']}{recorded}: "
        f"held-out PLM loss {result['loss']:.4f} nats{spread}, target accuracy "
        f"{result['accuracy']:.4f}, over {result['rows']:,} rows, {result['tokens']:,} "
        f"validation tokens and {result['targets']:,} targets.\n"
        "Context-free baselines on the whole validation split: the validation tokens' "
        "cross-entropy under the train split's unigram distribution (add-one smoothed) is "
        f"{result['train_unigram_cross_entropy']:.4f} nats; their own unigram entropy is "
        f"{result['validation_unigram_entropy']:.4f} nats."
    )
    for line in evaluate.corpus_table(result):  # a mixture: each corpus's held-out loss
        print(line)
    return 0


def _define_prepare(fv: flags.FlagValues) -> None:
    flags.DEFINE_string("out", None, "Output corpus directory.", flag_values=fv)
    flags.DEFINE_integer("vocab_size", 32000, "SentencePiece vocabulary size.", flag_values=fv)
    flags.DEFINE_string(
        "spm_model",
        None,
        "Use this SentencePiece .model instead of training, or an HF XLNet directory's "
        "(its spiece.model, or its tokenizer.json's Unigram model converted).",
        flag_values=fv,
    )
    flags.DEFINE_bool("uncased", False, "Lowercase the text before tokenizing.", flag_values=fv)
    flags.DEFINE_bool(
        "keep_accents",
        False,
        "Keep accents: no NFKD and no mark stripping (SentencePiece's NFKC still applies).",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "tfds_name", None, "A locally available tfds text dataset to read.", flag_values=fv
    )
    flags.DEFINE_string(
        "tfds_text_feature", "text", "The text feature of --tfds_name.", flag_values=fv
    )
    flags.DEFINE_string("tfds_split", "train", "The split of --tfds_name to read.", flag_values=fv)
    flags.DEFINE_string(
        "tfds_data_dir",
        None,
        "Where --tfds_name is prepared (default: TFDS_DATA_DIR or ~/tensorflow_datasets).",
        flag_values=fv,
    )
    flags.DEFINE_float("validation_fraction", 0.02, "Share of documents held out.", flag_values=fv)
    flags.DEFINE_integer(
        "num_workers",
        None,
        "Tokenizer processes, or the DirectRunner's worker processes with --beam_runner "
        "DirectRunner (default: all cores).",
        flag_values=fv,
    )
    flags.DEFINE_integer("seed", 0, "Seed of the train/validation split.", flag_values=fv)
    flags.DEFINE_integer(
        "num_shards",
        64,
        "array_record shards per split (fewer for a split of fewer documents): "
        "a run on up to this many hosts reads a share of the corpus on each "
        "(config.data_ranges, by default the run's process count).",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "beam_runner",
        None,
        "Prepare with an Apache Beam pipeline on this runner: DirectRunner (local worker "
        "processes), DataflowRunner, FlinkRunner, SparkRunner... Needs the beam extra.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "beam_options",
        None,
        'More Beam pipeline options, one string, e.g. "--project=P --region=R '
        '--temp_location=gs://B/tmp" (alone: Beam with the runner these options name).',
        flag_values=fv,
    )


def _prepare_main(fv: flags.FlagValues, args: list[str]) -> int:
    from xlnet_jax.data.prepare import pipeline_options, prepare_corpus
    from xlnet_jax.data.spm_source import resolve_spm_model

    # local or gs://: the shards go there from whichever process writes them
    prepare_corpus(
        args,
        _require(fv, "out"),
        vocab_size=fv.vocab_size,
        spm_model=fv.spm_model and resolve_spm_model(fv.spm_model),
        uncased=fv.uncased,
        keep_accents=fv.keep_accents,
        tfds_name=fv.tfds_name,
        tfds_text_feature=fv.tfds_text_feature,
        tfds_split=fv.tfds_split,
        tfds_data_dir=fv.tfds_data_dir,
        validation_fraction=fv.validation_fraction,
        num_workers=fv.num_workers,
        num_shards=fv.num_shards,
        seed=fv.seed,
        beam_options=pipeline_options(fv.beam_runner, fv.beam_options, fv.num_workers),
    )
    return 0


def _define_out(fv: flags.FlagValues) -> None:
    flags.DEFINE_string("out", None, "Output directory.", flag_values=fv)


def _single_source(args: list[str]) -> str:
    if len(args) != 1:
        raise UsageError(f"expected exactly one SRC, got {len(args)}: {args}")
    return args[0]


def _import_hf_main(fv: flags.FlagValues, args: list[str]) -> int:
    from xlnet_jax.checkpoint import hf

    source, out = _single_source(args), _require(fv, "out")
    config = hf.import_hf(source, out)
    print(
        f"imported {source} ({config.n_layer} x {config.d_model}, vocabulary "
        f"{config.vocab_size}) to {out}; start a run from it with `xlnet-jax train "
        f"--init_from {out} ...`"
    )
    return 0


def _define_export_hf(fv: flags.FlagValues) -> None:
    _define_out(fv)
    flags.DEFINE_float(
        "dropout",
        0.1,
        "Dropout (hidden states and attention) written into the export's config.json, "
        "what fine-tuning starts with, whatever the run pretrained with.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "data_dir",
        None,
        "A fine-tuning workdir's --data_dir: AutoTokenizer's ids of the export are compared "
        "with the run's on its train and dev text, and the agreement printed.",
        flag_values=fv,
    )


def _export_hf_main(fv: flags.FlagValues, args: list[str]) -> int:
    from xlnet_jax.checkpoint import export

    source, out = _single_source(args), _require(fv, "out")
    print(export.export_to_hf(source, out, fv.dropout))
    if fv.data_dir:
        from xlnet_jax import paths
        from xlnet_jax.checkpoint.hf import FINETUNE_FILE
        from xlnet_jax.finetune import hf_ids

        if not (paths.as_path(source) / FINETUNE_FILE).is_file():
            raise UsageError(f"--data_dir is for a fine-tuning workdir; {source} is not one")
        print(hf_ids.check_export(source, out, fv.data_dir))
    return 0


def _finetune_main(fv: flags.FlagValues, args: list[str]) -> int:
    del args
    config = _config(fv)
    names = ("task_name", "data_dir", "init_from", "workdir")
    task_name, data_dir, init_from, workdir = (_require(fv, name) for name in names)
    if fv.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {fv.seeds}")
    if fv.seeds > 1 and (fv.coordinator_address or fv.distributed):
        raise UsageError(
            f"--seeds {fv.seeds} runs in one process; several processes share one seed's run "
            "only: drop --seeds, or run the seeds on one host"
        )
    if fv.devices_per_seed < 0 or (fv.devices_per_seed and fv.seeds == 1):
        raise UsageError(
            f"--devices_per_seed {fv.devices_per_seed}: it sets how many devices each of "
            "--seeds N runs on, side by side (N > 1, D >= 1); drop it for one seed"
        )
    _setup_jax(fv)
    from xlnet_jax.finetune import outputs, prepare, seeds, train

    inputs = prepare.read_inputs(config, task_name, data_dir, init_from)
    with _exit_codes_of_a_stop():
        if fv.seeds == 1:
            record = train.finetune(inputs, workdir, random_weights=fv.random_weights)
        else:
            record = seeds.finetune_seeds(
                inputs, workdir, fv.seeds, random_weights=fv.random_weights,
                devices_per_seed=fv.devices_per_seed,
            )  # fmt: skip
    print(outputs.to_json(record, indent=2))
    return 0


def _define_compile(fv: flags.FlagValues) -> None:
    _define_config(fv)
    flags.DEFINE_string(
        "topology",
        None,
        'TPU slice: a Cloud accelerator type ("v4-64") or a libtpu topology ("v4:2x4x4").',
        flag_values=fv,
    )
    flags.DEFINE_string(
        "gpu", None, 'NVIDIA cards on one host, NAME[:COUNT], e.g. "h100-80gb:8".', flag_values=fv
    )
    flags.DEFINE_string("save", None, "Write the serialized executable here.", flag_values=fv)
    flags.DEFINE_string(
        "task_name",
        None,
        "Compile the fine-tuning step of this task (see `xlnet-jax finetune --help`) instead "
        "of the pretraining step; the config is a fine-tuning one (configs/finetune/).",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "devices_per_seed",
        0,
        "With --task_name: compile one seed's step on D of the devices, as `finetune --seeds N "
        "--devices_per_seed D` runs each seed, and say how many seeds run side by side.",
        flag_values=fv,
    )


def _compile_main(fv: flags.FlagValues, args: list[str]) -> int:
    del args
    if fv.devices_per_seed and not fv.task_name:
        raise UsageError("--devices_per_seed is for a fine-tuning step; add --task_name")
    if fv.task_name:
        if fv.save:
            raise UsageError("--save is for the pretraining step; drop it with --task_name")
        from xlnet_jax.finetune import compile as finetune_compile

        return finetune_compile.compile_for(
            _config(fv), fv.task_name, topology=fv.topology, gpu=fv.gpu,
            devices_per_seed=fv.devices_per_seed,
        )  # fmt: skip
    from xlnet_jax.training import fit

    return fit.compile_for(_config(fv), topology=fv.topology, gpu=fv.gpu, save=fv.save)


COMMANDS = {
    "prepare": Command(
        "Train SentencePiece and write a tokenized tfds corpus (no FILES: built-in corpus).",
        _define_prepare,
        _prepare_main,
        "[FILES_OR_GLOBS ...]",
    ),
    "train": Command("Pretrain (resumes automatically from WORKDIR).", _define_train, _train_main),
    "eval": Command(
        "Evaluate WORKDIR's newest checkpoint (or --init_from params) on a validation split.",
        _define_eval,
        _eval_main,
    ),
    "finetune": Command(
        "Fine-tune a pretrained model on GLUE, RACE or your own labels (resumes from WORKDIR).",
        _define_finetune,
        _finetune_main,
    ),
    "compile": Command(
        "AOT-compile the train step for a TPU slice or NVIDIA cards and report memory.",
        _define_compile,
        _compile_main,
    ),
    "import-hf": Command(
        "HuggingFace XLNetLMHeadModel directory -> xlnet-jax params directory.",
        _define_out,
        _import_hf_main,
        "SRC",
    ),
    "export-hf": Command(
        "xlnet-jax params directory or train WORKDIR -> HuggingFace directory.",
        _define_export_hf,
        _export_hf_main,
        "SRC",
    ),
}


def _print_usage() -> None:
    width = max(len(name) for name in COMMANDS) + 2
    lines = [f"  {name.ljust(width)}{cmd.summary}" for name, cmd in COMMANDS.items()]
    lines.append(f"  {'launch'.ljust(width)}Create, set up and run TPU pod slices (or local).")
    print(USAGE.format(commands="\n".join(lines)))


def _parse(fv: flags.FlagValues, name: str, rest: list[str]) -> list[str]:
    """Parses the flags; returns the positional arguments. Config errors become UsageError."""
    try:
        args = fv([f"xlnet-jax {name}", *rest])[1:]
    except (AttributeError, KeyError) as e:  # config_flags: an override names no field
        raise _unknown_override(name, rest) or UsageError(f"--config: {e}") from None
    if "config" in fv and fv["config"].value is not None:
        try:
            fv.config.get("seed")
        except Exception as e:  # noqa: BLE001 - config_flags defers load errors to first use
            raise UsageError(f"--config could not be loaded: {e}") from None
    return args


def _unknown_override(name: str, rest: list[str]) -> UsageError | None:
    """The error for the first --config.PATH override that is not a field of the config.

    The config file is loaded again without the overrides, and each override's path is
    looked up in it, so the message comes from the config itself, not from parsing
    ml_collections' error text.
    """
    # config_flags reads the overrides from sys.argv: give the probe an argv without them.
    plain = [f"xlnet-jax {name}", *(a for a in rest if not a.startswith("--config."))]
    probe = flags.FlagValues()
    _define_config(probe, sys_argv=plain)
    probe(plain, known_only=True)
    for arg in rest:
        if not arg.startswith("--config."):
            continue
        path = arg.removeprefix("--config.").split("=", 1)[0].split(".")
        node = probe.config
        for depth, part in enumerate(path):
            fields = list(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
            if part not in fields:
                field = ".".join(path[: depth + 1])
                hint = difflib.get_close_matches(part, fields, n=1)
                return UsageError(
                    f"unknown config field {field!r} (from --config.{field}=...)"
                    + (f"; did you mean {hint[0]!r}?" if hint else "; see the config file.")
                )
            node = node[part]
    return None


def _has_accelerator() -> bool:
    """Whether this machine shows a TPU (or GPU) device, without initialising any backend."""
    devices = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/kfd")
    return any(glob.glob(pattern) for pattern in devices) or "TPU_ACCELERATOR_TYPE" in os.environ


def _select_platform(name: str) -> None:
    """CPU when no accelerator is present, unless JAX_PLATFORMS already says otherwise.

    With libtpu installed (the test extra brings it), JAX otherwise lets libtpu probe for
    a TPU first, and on a CPU machine that prints a screen of errors before every command.
    `compile` keeps the default: it asks libtpu for TPU topologies, with no TPU present.
    """
    if name != "compile" and "JAX_PLATFORMS" not in os.environ and not _has_accelerator():
        os.environ["JAX_PLATFORMS"] = "cpu"


def _exit_now(code: int) -> None:
    """Exits without waiting for library threads: the error line stays the last word.

    Everything that must reach disk was closed by the command's own cleanup before the
    error got here; what remains are orbax's idle asyncio threads, whose shutdown would
    print tracebacks after the message.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    """Runs `xlnet-jax` with argv (without the program name); returns the exit code."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        _print_usage()
        return 0
    name, rest = argv[0], argv[1:]
    if name == "launch":
        from xlnet_jax.launch import pod

        return pod.main(rest)
    if name not in COMMANDS:
        _print_usage()
        print(f"xlnet-jax: error: unknown command {name!r}", file=sys.stderr)
        return 2
    command = COMMANDS[name]
    _select_platform(name)
    fv = flags.FlagValues()
    command.define(fv)
    if "--help" in rest or "-h" in rest:
        print(f"usage: xlnet-jax {name} {command.positional} [flags]\n\n{command.summary}\n")
        print(fv.get_help())
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("xlnet_jax").setLevel(logging.INFO)
    try:
        if name in ("train", "eval"):
            rest = _with_run_config(rest, reads_run=name == "eval")
        args = _parse(fv, name, rest)
        from xlnet_jax.launch import supervise

        if supervise.needed(fv):  # one of a multi-process job: a lost peer is one line
            return supervise.run([sys.executable, *sys.orig_argv[1:]], name, fv.process_id)
        return command.main(fv, args)
    except (flags.Error, UsageError) as e:
        print(f"xlnet-jax {name}: error: {e}", file=sys.stderr)
        return 2
    except XLNetJaxError as e:  # its message is the whole story
        print(f"xlnet-jax {name}: error: {e}", file=sys.stderr)
        _exit_now(STORAGE_EXIT_CODE if isinstance(e, StorageError) else 1)
    except KeyboardInterrupt:  # Ctrl-C outside the training loop: one line, no traceback
        print(f"\nxlnet-jax {name}: interrupted (Ctrl-C).", file=sys.stderr)
        _exit_now(INTERRUPTED_EXIT_CODE)


def hide_known_warnings() -> None:
    """Keeps jax's warnings that only this project can act on out of the command's output."""
    warnings.filterwarnings(
        "ignore", message=PALLAS_TRITON_DEPRECATION, category=DeprecationWarning
    )


def run() -> None:
    """Console-script entry point."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    hide_known_warnings()
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    run()
