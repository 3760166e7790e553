"""Each adapter of another library's private names checks them before first use: on the
pinned versions the check passes; a release that changed a name stops in one line naming
the library and its version. Importing a module patches nothing."""

import importlib.util
import re

import gcsfs.core
import pytest
from orbax.checkpoint._src import asyncio_utils
from orbax.checkpoint._src.serialization import tensorstore_utils

from xlnet_jax import paths
from xlnet_jax.checkpoint import checkpointer, orbax_adapter, reader, tensorstore_adapter
from xlnet_jax.errors import MissingDependencyError
from xlnet_jax.paths import gcsfs_adapter
from xlnet_jax.run import fence


def _one_line_naming(info: pytest.ExceptionInfo, library: str, what: str) -> None:
    message = str(info.value)
    assert "\n" not in message
    assert re.match(rf"^{library} \d+\.\S+: .*{what}", message), message


def test_the_pinned_versions_pass_every_check():
    gcsfs_adapter.check()
    assert all(isinstance(c, dict) for c in orbax_adapter.tensorstore_contexts())
    policy = paths.retry_policy()
    tensorstore_adapter.use_gcs_retries(policy)
    retries = tensorstore_adapter.gcs_retries(policy)
    assert all(c["gcs_request_retries"] == retries for c in orbax_adapter.tensorstore_contexts())


def test_a_gcsfs_request_method_with_another_signature_is_named(monkeypatch):
    async def renamed(self, verb, url, *args, **kwargs):
        del self, verb, url, args, kwargs

    monkeypatch.setattr(gcsfs.core.GCSFileSystem, "_request", renamed)
    with pytest.raises(MissingDependencyError) as info:
        gcsfs_adapter.check()
    _one_line_naming(info, "gcsfs", r"GCSFileSystem\._request takes")


def test_a_missing_orbax_name_is_named(monkeypatch):
    monkeypatch.delattr(tensorstore_utils, "_BASE_TS_CONTEXT")
    with pytest.raises(MissingDependencyError) as info:
        orbax_adapter.tensorstore_contexts()
    _one_line_naming(info, "orbax-checkpoint", "_BASE_TS_CONTEXT is NoneType")
    monkeypatch.setattr(orbax_adapter, "_drained", False)
    monkeypatch.delattr(asyncio_utils, "_run_sync_via_new_loop")
    with pytest.raises(MissingDependencyError) as info:
        orbax_adapter.drain_sync_loops()
    _one_line_naming(info, "orbax-checkpoint", "_run_sync_via_new_loop is gone")


def test_a_tensorstore_that_refuses_the_retry_resource_is_named(monkeypatch):
    monkeypatch.setattr(tensorstore_adapter, "RESOURCE", "gcs_request_retries_v2")
    with pytest.raises(MissingDependencyError) as info:
        tensorstore_adapter.use_gcs_retries(paths.RetryPolicy())
    _one_line_naming(info, "tensorstore", "gcs_request_retries_v2 is refused")


def test_importing_patches_nothing_until_storage_is_first_used(monkeypatch):
    """A fresh copy of each module that uses an adapter, executed here, calls none of them;
    the first remote path does."""
    calls = []
    for adapter, name in (
        (gcsfs_adapter, "replace_requests"),
        (gcsfs_adapter, "wrap_request"),
        (orbax_adapter, "drain_sync_loops"),
        (tensorstore_adapter, "use_gcs_retries"),
    ):
        monkeypatch.setattr(adapter, name, lambda *args, name=name: calls.append(name))
    for module in (paths, checkpointer, fence, reader):
        spec = importlib.util.spec_from_file_location(f"fresh_{module.__name__}", module.__file__)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert calls == []
    assert paths.is_remote("gs://bucket/run")
    assert calls == ["replace_requests"]
