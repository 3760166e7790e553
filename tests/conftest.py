"""Test setup: 8 simulated CPU devices, quick compiles and the test run's compilation cache
(tests/xla_flags.py), and float32 matmuls, before jax is imported."""

import os
import sys

from tests.xla_flags import COMPILATION_CACHE, FAST_COMPILE  # noqa: E402

os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# gcsfs picks its filesystem class at import: without the gRPC bucket-type probe, which the
# local GCS emulator (tests/gcs_emulator.py) lacks.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
jax.config.update("jax_compilation_cache_dir", COMPILATION_CACHE)

# Storage readied before any test makes a gs:// filesystem, as a command readies it before
# its first gs:// path (xlnet_jax.paths.is_remote): the tests also reach the emulator
# through etils and gcsfs directly, and a filesystem made first would keep its listing
# cache for the worker's life, whichever test files ran in that worker before.
from xlnet_jax import paths  # noqa: E402

paths.use_storage()

# The files that take minutes (multi-process runs, TPU compiles), longest first. pytest-xdist
# hands files to its workers in collection order (scripts/test.sh turns off its own order,
# most tests first, which left these one-test files for last): started first, they run
# beside the many short files, and the workers end together instead of one running the
# longest file alone at the end. Measured with `--durations` on the whole suite.
LONGEST_FIRST = (
    "test_benchmarks_smoke.py",
    "test_compile.py",
    "test_multihost_restart.py",
    "test_pages.py",
    "test_train_resume.py",
    "test_multihost_host_death.py",
    "test_gcs_faults_e2e.py",
    "test_triton_kernel.py",
    "test_attention_kernel.py",
    "test_finetune_every_task.py",
    "test_finetune_run.py",
    "test_host_share.py",
    "test_finetune_multihost.py",
    "test_model_leakage.py",
    "test_attention_fallback.py",
    "test_multihost_faults.py",
    "test_split_brain.py",
    "test_multihost.py",
    "test_kernel_cost.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Puts LONGEST_FIRST's files first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def cli_errors_end_the_call_not_the_worker(monkeypatch):
    """An `xlnet-jax` command that fails exits at once (`cli._exit_now`: os._exit, so that
    library threads print nothing after its line). Called in-process by a test, that would
    end the pytest worker itself, which pytest-xdist reports as a crashed node and can wait
    on forever; here it raises SystemExit with the command's exit code instead."""
    from xlnet_jax import cli

    monkeypatch.setattr(cli, "_exit_now", lambda code: sys.exit(code))


@pytest.fixture
def committed_tree(monkeypatch):
    """`launch setup/run` see this checkout as committed: the tests that use it check the
    commands, whatever the developer's tree holds (tests/test_launch_dirty.py checks the
    refusal of a dirty one)."""
    from xlnet_jax.launch import pod

    monkeypatch.setattr(pod, "uncommitted_files", lambda source: [])


@pytest.fixture
def fresh_proxy(proxy):
    """The module's fault proxy (its own `proxy` fixture), reset before and after the test."""
    proxy.reset()
    yield proxy
    proxy.reset()
