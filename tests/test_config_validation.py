"""Bad configs are rejected before anything compiles, in one line naming field and constraint."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_data_common import small_corpus
from tests.train_config import small_config
from xlnet_jax import cli
from xlnet_jax.errors import UsageError, WorkdirError
from xlnet_jax.run.preflight import check_run
from xlnet_jax.run.validate import ConfigError, validate_config

ROOT = Path(__file__).resolve().parents[1]

# (overrides, devices, the field the message must name, a word of the constraint)
BAD_CONFIGS = [
    (dict(perm_size=12), None, "perm_size", "divide"),
    (dict(reuse_len=32), None, "reuse_len", "seq_len"),
    (dict(reuse_len=-1), None, "reuse_len", ">= 0"),
    (dict(num_predict=40), None, "num_predict", "non-functional"),
    (dict(batch_size=6), 4, "batch_size", "data shards"),
    (dict(bi_data=True, batch_size=12), 4, "bi_data", "even"),
    (dict(mesh_data=3), 8, "mesh_data", "8 devices"),
    (dict(mesh_data=-1, mesh_fsdp=-1), 8, "mesh_fsdp", "-1"),
    (dict(learning_rate=-1e-3), None, "learning_rate", "> 0"),
    (dict(mem_len=-4), None, "mem_len", ">= 0"),
    (dict(warmup_steps=50, num_train_steps=20), None, "warmup_steps", "num_train_steps"),
    (dict(n_head=5), None, "d_model", "n_head"),
    (dict(max_span=0), None, "max_span", ">= 1"),
    (dict(dropout=1.5), None, "dropout", "[0, 1)"),
    (dict(ff_activation="swish"), None, "ff_activation", "gelu"),
    (dict(dtype="float16"), None, "dtype", "bfloat16"),
    (dict(grad_accum_steps=3), None, "batch_size", "grad_accum_steps"),
    (dict(nonfinite_policy="ignore"), None, "nonfinite_policy", "halt"),
    (dict(clip_norm=-1.0), None, "clip_norm", ">= 0"),
    (dict(adam_b2=1.0), None, "adam_b2", "[0, 1)"),
    (dict(min_lr_ratio=2.0), None, "min_lr_ratio", "[0, 1]"),
    (dict(mesh_tensor=3), 8, "mesh_data", "does not divide 8"),
    (dict(learning_rate=float("nan")), None, "learning_rate", "> 0"),
    (dict(num_predict=0), None, "num_predict", ">= 1"),
    (dict(num_train_steps=0), None, "num_train_steps", "> 0"),
    (dict(batch_size=0), None, "batch_size", "> 0"),
    (dict(checkpoint_every=0), None, "checkpoint_every", ">= 1"),
    (dict(keep_checkpoints=0), None, "keep_checkpoints", ">= 1"),
    (dict(eval_every=-1), None, "eval_every", ">= 0"),
    (dict(adam_eps=0.0), None, "adam_eps", "> 0"),
    (dict(weight_decay=-1.0), None, "weight_decay", ">= 0"),
    (dict(learning_rate=float("inf")), None, "learning_rate", "finite"),
    (dict(vocab_size=3), None, "vocab_size", "special pieces"),
    (dict(mesh_tensor=8), 8, "mesh_tensor", "divide n_head"),
    (dict(scan_unroll=0), None, "scan_unroll", ">= 1"),
]


@pytest.mark.parametrize(("overrides", "devices", "field", "constraint"), BAD_CONFIGS)
def test_bad_config_is_rejected_naming_the_field(overrides, devices, field, constraint):
    with pytest.raises(ConfigError) as info:
        validate_config(small_config(**overrides), devices)
    message = str(info.value)
    assert "\n" not in message
    assert f"config.{field}" in message or f"config.{field}" in message.replace(" x ", "")
    assert constraint in message


def test_good_config_passes_on_every_device_count():
    for devices in (None, 1, 2, 4, 8):
        validate_config(small_config(), devices)


def test_cli_rejects_unknown_field_and_bad_value_in_one_line(tmp_path):
    def run(*overrides):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "xlnet_jax.cli",
                "train",
                "--config",
                "configs/tiny.py",
                "--workdir",
                str(tmp_path),
                *overrides,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    unknown = run("--config.learning_rat=1e-3")
    # One form for every error, `xlnet-jax COMMAND: error: ...`: 2 for the command line, 1 else.
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("xlnet-jax train: error: unknown config field 'learning_rat'")
    assert "Traceback" not in unknown.stderr

    negative = run("--config.learning_rate=-1.0", "--config.corpus_dir=/nonexistent")
    assert negative.returncode == 1
    assert negative.stderr.startswith("xlnet-jax train: error: ")
    assert "config.learning_rate: must be a finite number > 0" in negative.stderr
    assert "Traceback" not in negative.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_tokenizer_vocab_must_match_the_config():
    """The prepared corpus's tokenizer has 500 pieces; a 100-entry embedding cannot hold it."""
    with pytest.raises(ConfigError) as info:
        check_run(small_config(corpus_dir=small_corpus()), 1, evaluates=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("config.vocab_size: must equal the tokenizer's vocabulary, 500")
    assert "(got 100)" in message


def test_missing_corpus_dir_is_named():
    with pytest.raises(ConfigError, match=r"config.corpus_dir: is empty; run `xlnet-jax prepare"):
        check_run(small_config(corpus_dir=""), 1, evaluates=False)


def _empty_dir(tmp_path) -> str:
    (tmp_path / "empty").mkdir()
    return str(tmp_path / "empty")


# Issue 18's five configs that once trained (or crashed) instead of stopping in one line:
# (override, the field named, words of its valid range).
ISSUE_18_CASES = [
    ("layer_norm_eps=-1.0", "layer_norm_eps", "in (0, 1)"),
    ("initializer_range=nan", "initializer_range", "in (0, 1]"),
    ("seed=-1", "seed", "in [0, 2147483646]"),
    ("logical_axis_rules=foo", "logical_axis_rules", "(logical axis, mesh axes) pairs"),
    ("corpus_dir={empty}", "corpus_dir", "is not a prepared corpus"),
]


@pytest.mark.parametrize(("override", "field", "valid_range"), ISSUE_18_CASES)
def test_cli_stops_before_compiling_naming_field_and_range(override, field, valid_range, tmp_path):
    workdir = tmp_path / "run"
    override = override.format(empty=_empty_dir(tmp_path))
    result = subprocess.run(
        [
            sys.executable, "-m", "xlnet_jax.cli", "train",
            "--config", "configs/tiny.py", "--workdir", str(workdir),
            "--config.vocab_size=500", f"--config.corpus_dir={small_corpus()}",
            "--config.eval_steps=4",  # the small corpus's validation split holds 4 batches
            f"--config.{override}",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert errors == [result.stderr.strip().splitlines()[-1]], result.stderr[-3000:]
    assert errors[0].startswith(f"xlnet-jax train: error: config.{field}: ")
    assert valid_range in errors[0]
    assert "Traceback" not in result.stderr and "Compiled" not in result.stderr
    assert not workdir.exists()  # nothing written, no checkpoint


# A config with three problems at once: the first attempts of a newcomer on a new corpus.
NEWCOMER_MISTAKES = dict(vocab_size=100, warmup_steps=50, num_train_steps=12, eval_steps=1000)


def test_every_config_and_corpus_problem_is_reported_in_one_go():
    config = small_config(corpus_dir=small_corpus(), eval_every=6, **NEWCOMER_MISTAKES)
    with pytest.raises(ConfigError) as info:
        check_run(config, 1, evaluates=True)
    head, *lines = str(info.value).splitlines()
    assert head == "3 problems with the config and corpus:"
    assert lines[0].strip().startswith("config.warmup_steps: must not exceed num_train_steps=12")
    assert lines[1].strip().startswith("config.vocab_size: must equal the tokenizer's")
    assert lines[1].endswith("pass --config.vocab_size=500.")
    assert "'validation' split has" in lines[2] and "--config.eval_steps=" in lines[2]
    # Each suggested value passes.
    eval_steps = int(lines[2].split("--config.eval_steps=")[1].split()[0])
    config.update(vocab_size=500, warmup_steps=12, eval_steps=eval_steps)
    check_run(config, 1, evaluates=True)


def test_dry_run_checks_without_compiling_or_writing(tmp_path):
    def dry_run(*overrides):
        return subprocess.run(
            [sys.executable, "-m", "xlnet_jax.cli", "train", "--dry_run",
             "--config", "tests/train_config.py", "--workdir", str(tmp_path / "run"),
             f"--config.corpus_dir={small_corpus()}", *overrides],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    bad = dry_run("--config.warmup_steps=50", "--config.vocab_size=100")
    assert bad.returncode == 1, bad.stderr
    assert "2 problems with the config and corpus:" in bad.stderr
    assert "Traceback" not in bad.stderr
    good = dry_run()
    assert good.returncode == 0, good.stderr
    assert "dry run: the config and the corpus" in good.stdout
    assert "Compiled" not in good.stderr
    assert not (tmp_path / "run").exists()


def test_without_config_a_workdir_with_no_run_names_what_is_missing(tmp_path):
    """A rerun or eval takes WORKDIR/config.json; before the first run there is none."""
    with pytest.raises(UsageError, match=r"^--config.batch_size needs --config \(.* no run yet"):
        cli._with_run_config(["--workdir", str(tmp_path), "--config.batch_size=16"])
    (tmp_path / "config.json").write_text(small_config().to_json_best_effort())
    assert cli._with_run_config(["--workdir", str(tmp_path)])[0].endswith(f"py:{tmp_path}")


def test_eval_of_a_missing_workdir_says_so_and_names_the_runs_beside_it(tmp_path, capsys):
    """A typo in eval's --workdir is named before --config is asked for (issue 32,
    friction 5); train creates its workdir, so it is not asked."""
    for name in ("zh", "zh-continued", "en"):
        (tmp_path / name).mkdir()
    with pytest.raises(WorkdirError) as info:
        cli._with_run_config(["--workdir", str(tmp_path / "zhh")], reads_run=True)
    assert str(info.value) == (f"Workdir {tmp_path / 'zhh'} does not exist; {tmp_path} holds zh.")
    with pytest.raises(WorkdirError, match=r"does not exist \(nor does .*nowhere\)\.$"):
        cli._with_run_config(["--workdir", str(tmp_path / "nowhere" / "run")], reads_run=True)
    assert cli.main(["eval"]) == 2
    assert capsys.readouterr().err == (
        "xlnet-jax eval: error: --workdir (a run) or --init_from (params to score) is required\n"
    )
    assert cli._with_run_config(["--workdir", str(tmp_path / "zhh")]) == [
        "--workdir", str(tmp_path / "zhh")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "devices"),
    [
        (dict(seq_len=50), None),  # the new block, 18, is no multiple of perm_size=32
        (dict(perm_size=24), None),  # divides neither block
        (dict(num_predict=64), None),  # more targets than the blocks hold
        (dict(bi_data=True, batch_size=20), 4),  # 5 rows per data shard: odd
    ],
)
def test_a_derived_constraint_names_values_that_work(overrides, devices):
    """Each value the message names passes every check when applied: the one field alone,
    or the (reuse_len, perm_size) pair with the user's seq_len."""
    from configs.tiny import get_config

    config = get_config()
    config.update(overrides)
    with pytest.raises(ConfigError) as failure:
        validate_config(config, devices)
    message = str(failure.value)
    assert len(message.splitlines()) == 1
    singles = re.search(r"one field changed: (.*?)(?:;|\.$)", message)
    batch = re.search(r"batch_size=([\d ]+(?:or [\d ]+)?) would work", message)
    fixes = [
        {field: int(value)}
        for field, values in re.findall(r"(\w+)=([\d ]+(?:or \d+)?)", (singles or batch)[1])
        for value in values.split(" or ")
    ] if singles else [{"batch_size": int(v)} for v in batch[1].split(" or ")]  # fmt: skip
    pair = re.search(r"with seq_len=\d+: reuse_len=(\d+) and perm_size=(\d+)", message)
    if pair:
        fixes.append(dict(reuse_len=int(pair[1]), perm_size=int(pair[2])))
    assert fixes, message
    for fix in fixes:
        fixed = get_config()
        fixed.update({**overrides, **fix})
        validate_config(fixed, devices)  # raises if the advice were wrong
    if "seq_len" in overrides:
        assert "seq_len=64" in message and "reuse_len=25 and perm_size=25" in message


PRESETS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.py"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_presets_schedule_follows_a_shortened_run(preset):
    """Each preset's warmup, evaluation and checkpoint intervals are fractions of its
    num_train_steps, so a `--config.num_train_steps=N` on the command line gives a run that
    warms up, evaluates (where the preset evaluates along the way) and saves within its N
    steps, and an interval is never 0 (which the checks refuse) even at N = 1 or 2 (tiny at
    400 steps printed no held-out loss; at 30 it refused to start, warmup 100 > 30)."""
    from absl import flags

    from xlnet_jax.run.flags import define_config

    def loaded(*overrides):
        argv = ["x", f"--config={preset}", *overrides]
        values = flags.FlagValues()
        define_config(values, sys_argv=argv)
        values(argv)
        return values.config

    full = loaded()
    for steps in (1, 2, 40):
        short = loaded(f"--config.num_train_steps={steps}")
        assert short.warmup_steps <= steps, (preset, steps, short.warmup_steps)
        assert short.checkpoint_every >= 1, (preset, steps)
        if full.eval_every:
            assert 1 <= short.eval_every <= max(steps, 1), (preset, steps, short.eval_every)
        if steps == 40:
            for field in ("warmup_steps", "eval_every", "checkpoint_every"):
                if full[field] > 40:
                    assert short[field] <= 40, (preset, field, short[field])
