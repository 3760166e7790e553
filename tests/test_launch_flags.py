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
