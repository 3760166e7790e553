"""Test setup: 8 simulated CPU devices and float32 matmuls, before jax is imported."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# gcsfs picks its filesystem class at import: without the gRPC bucket-type probe, which the
# local GCS emulator (tests/gcs_emulator.py) lacks.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


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
