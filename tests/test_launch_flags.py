"""`launch` takes its flags with underscores too, as the other commands spell theirs."""

from xlnet_jax.launch import names, pod

DASHED = [
    "train", "--backend", "local", "--num-processes", "2", "--num-cpu-devices=2",
    "--config", "configs/tiny.py", "--workdir", "some_dir", "--dry-run",
    "--config.num_train_steps=3", "--allow_version_change",
]  # fmt: skip


def test_underscores_parse_as_dashes():
    underscored = [a.replace("num-", "num_").replace("cpu-", "cpu_") for a in DASHED]
    underscored[underscored.index("--dry-run")] = "--dry_run"
    assert underscored != DASHED
    assert vars(pod._parse(underscored)) == vars(pod._parse(DASHED))


def test_values_overrides_and_passed_on_switches_keep_their_spelling():
    argv = ["--name=my_slice", "my_value", "--config.mem_len=4", "--allow_version_change"]
    assert names.dashed(argv, pod.TRAIN_SWITCHES) == [
        "--name=my_slice", "my_value", "--config.mem_len=4", "--allow_version_change"
    ]  # fmt: skip


def _dry_run(capsys, argv) -> str:
    assert pod.main([*argv, "--dry-run"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_every_train_and_finetune_flag_is_passed_on_as_the_program_spells_it(capsys):
    """The launcher's pass-through flags come from cli.py's one declaration: a flag the
    trainer names in a message (`--change_schedule` after a finished run) cannot be
    refused by `launch` (issue 61). Each, in either spelling, reaches the program's command."""
    from absl import flags as absl_flags

    from xlnet_jax import cli

    local = ["--backend", "local", "--config", "configs/tiny.py", "--workdir", "w"]
    finetune = ["--task-name=cola", "--data-dir=d", "--init-from=i"]
    for program in ("train", "finetune"):
        values = absl_flags.FlagValues()
        cli.COMMANDS[program].define(values)
        for name in set(values) - pod.LAUNCHER_OWNED:
            switch = isinstance(values[name], absl_flags.BooleanFlag)
            for spelling in (f"--{name}", f"--{name.replace('_', '-')}"):
                given = [spelling] if switch else [spelling, "7"]
                if program == "finetune" and name in ("task_name", "data_dir", "init_from"):
                    given = []  # already given below
                fine = finetune if program == "finetune" else []
                out = _dry_run(capsys, ["run", program, *local, *given, *fine])
                out = out.replace(" \\\n", "\n")
                wanted = f"--{name}" if switch else f"--{name}=7"
                assert given == [] or f"    {wanted}" in out.splitlines(), (program, spelling, out)


def test_the_trainers_switches_are_in_the_help():
    parser, subparsers = pod.build_parser()
    for command in ("train", "run"):
        text = subparsers[command].format_help()
        for flag in ("--change_schedule", "--allow_version_change", "--profile_steps"):
            assert flag in text, (command, flag)


def test_a_train_flag_with_finetune_is_refused_in_one_line(capsys):
    argv = ["run", "finetune", "--backend", "local", "--config", "c", "--workdir", "w",
            "--task-name=cola", "--data-dir=d", "--init-from=i", "--change_schedule"]  # fmt: skip
    assert pod.main([*argv, "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "xlnet-jax launch run: error: argument --change-schedule: only with PROGRAM train"
    )
