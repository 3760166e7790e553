"""Every use of orbax-checkpoint's private names (`orbax.checkpoint._src`), checked first.

- `tensorstore_contexts()`: the tensorstore context specs orbax builds every array read and
  write from (`tensorstore_utils._BASE_TS_CONTEXT`, `_DEFAULT_OCDBT_TS_CONTEXT`). orbax
  0.12.8 takes no context from its caller, so the gcs retries of the one storage policy
  are written into these (tensorstore_adapter.py).
- `drain_sync_loops()`: orbax runs each synchronous restore in a fresh asyncio loop
  (`asyncio_utils._run_sync_via_new_loop`) and closes that loop as soon as the restore
  raises, i.e. at the first array read that fails. The other reads of the restore are
  still in flight in TensorStore; as each one completes, its callback meets the closed
  loop and prints `RuntimeError: Event loop is closed` (or `Exception ignored in:
  <coroutine object _read_array_index_and_device_put ...>`): up to a hundred tracebacks
  after the one warning line of a checkpoint fallback. The replacement lets every task of
  the loop finish before closing it; their errors are dropped, since the first one already
  reached the caller. The quiet-fallback test in tests/test_damaged_checkpoints.py fails
  if an orbax upgrade routes around this function.

Public instead: the preservation policy (`ocp.checkpoint_managers.PreservationPolicy`) and
the async save's timeout (`ocp.AsyncOptions`). Each function checks, before it patches or
reads, that the name still has the shape it was written for (paths/library.py).
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

from orbax.checkpoint._src import asyncio_utils
from orbax.checkpoint._src.serialization import tensorstore_utils

from xlnet_jax.paths.library import expect, expect_value

LIBRARY = "orbax-checkpoint"
CONTEXTS = ("_BASE_TS_CONTEXT", "_DEFAULT_OCDBT_TS_CONTEXT")
_drained = False


def tensorstore_contexts() -> list[dict]:
    """The context specs (dicts, edited in place) every array orbax reads or writes uses."""
    return [expect_value(tensorstore_utils, name, dict, LIBRARY) for name in CONTEXTS]


def _run_sync_then_drain(coro: Coroutine) -> Any:
    """Runs `coro` in a fresh loop; before closing it, waits for the tasks it left behind."""
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        pending = asyncio.all_tasks(loop)
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        asyncio.set_event_loop(None)
        loop.close()


def drain_sync_loops() -> None:
    """Makes orbax's synchronous restores and saves drain their loop, once."""
    global _drained
    if _drained:
        return
    expect(asyncio_utils, "_run_sync_via_new_loop", ("coro",), LIBRARY)
    asyncio_utils._run_sync_via_new_loop = _run_sync_then_drain
    _drained = True
