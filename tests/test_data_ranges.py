"""config.data_ranges by default: the process count when a run starts, recorded for resumes.

`train` resolves the default (AUTO_RANGES) in plan_run, before the config is checked and
saved: a new run on P processes reads its splits in P ranges (each host stages and caches
1/P of the corpus); a resumed run keeps the number its config.json recorded, whatever the
process count now; an explicit number always wins. tests/test_host_share.py trains with the
default on 4 processes and checks the saved number end to end.
"""

import jax
import pytest

from tests.test_data_common import small_corpus
from tests.train_config import small_config
from xlnet_jax import config as config_lib
from xlnet_jax.errors import ConfigError
from xlnet_jax.training import run_config, train


def _config(**overrides):
    return small_config(vocab_size=500, corpus_dir=small_corpus(), eval_every=0, **overrides)


def _recorded_run(workdir, data_ranges: int | None, checkpoint: bool = True) -> str:
    """A workdir whose config.json records `data_ranges` (None: saved before the field)
    and, with `checkpoint`, a finished checkpoint at step 6."""
    saved = _config(data_ranges=data_ranges or 1)
    if data_ranges is None:
        del saved["data_ranges"]
    workdir.mkdir(parents=True, exist_ok=True)
    run_config.save(str(workdir), saved)
    if checkpoint:
        (workdir / "checkpoints" / "6").mkdir(parents=True)
        (workdir / "checkpoints" / "6" / "_CHECKPOINT_METADATA").write_text("{}")
    return str(workdir)


@pytest.fixture
def processes(monkeypatch):
    """Sets the process count plan_run sees."""

    def set_count(count: int) -> None:
        monkeypatch.setattr(jax, "process_count", lambda: count)

    return set_count


def test_the_default_is_auto():
    assert config_lib.default_config().data_ranges == config_lib.AUTO_RANGES


def test_a_new_run_reads_one_range_per_process(tmp_path, processes):
    processes(4)
    plan = train.plan_run(_config(), str(tmp_path))
    assert plan.config.data_ranges == 4  # the number train saves in config.json
    assert _config().data_ranges == config_lib.AUTO_RANGES  # the caller's config untouched


def test_a_process_count_that_does_not_divide_the_streams_falls_back_to_a_divisor(tmp_path):
    """bi_data halves the 4 rows into 2 streams: 4 processes read 2 ranges, 2 each."""
    config = _config(batch_size=4, bi_data=True)
    assert run_config.with_data_ranges(config, str(tmp_path), 4).data_ranges == 2
    assert run_config.with_data_ranges(config, str(tmp_path), 3).data_ranges == 1


def test_a_resume_on_another_process_count_keeps_the_recorded_ranges(tmp_path, processes):
    workdir = _recorded_run(tmp_path, data_ranges=4)
    processes(2)
    plan = train.plan_run(_config(), workdir)
    assert plan.config.data_ranges == 4


def test_a_resume_of_a_run_saved_before_the_field_reads_whole(tmp_path, processes):
    workdir = _recorded_run(tmp_path, data_ranges=None)
    processes(4)
    assert train.plan_run(_config(), workdir).config.data_ranges == 1


def test_a_run_without_a_checkpoint_starts_afresh_on_this_process_count(tmp_path, processes):
    """An attempt that stopped before its first checkpoint trained nothing to keep."""
    workdir = _recorded_run(tmp_path, data_ranges=1, checkpoint=False)
    processes(4)
    assert train.plan_run(_config(), workdir).config.data_ranges == 4


def test_an_explicit_number_wins(tmp_path, processes, caplog):
    processes(4)
    assert train.plan_run(_config(data_ranges=2), str(tmp_path)).config.data_ranges == 2
    workdir = _recorded_run(tmp_path / "run", data_ranges=4)
    caplog.set_level("INFO")
    assert train.plan_run(_config(data_ranges=1), workdir).config.data_ranges == 1
    assert "data_ranges 4 → 1" in caplog.text  # a resume lists the change in one line


def test_an_explicit_number_that_does_not_divide_the_streams_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^config\.data_ranges: must be 0 \(the process count\)"):
        train.plan_run(_config(data_ranges=3), str(tmp_path))
