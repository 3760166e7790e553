"""A failed orbax read leaves no tracebacks behind: its event loop drains before it closes.

orbax-checkpoint 0.12.8 runs each synchronous restore in a fresh asyncio loop
(`asyncio_utils._run_sync_via_new_loop`) and closes that loop as soon as the restore
raises, i.e. at the first array read that fails. The other reads of the restore are still
in flight in TensorStore; as each one completes, its callback meets the closed loop and
prints `RuntimeError: Event loop is closed` (or `Exception ignored in: <coroutine object
_read_array_index_and_device_put ...>`): up to a hundred tracebacks after the one warning
line of a checkpoint fallback, depending on timing. `install` replaces that function with
one that lets every task of the loop finish before closing it; their errors are dropped,
since the first one already reached the caller.
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

from orbax.checkpoint._src import asyncio_utils


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


def install() -> None:
    """Makes orbax's synchronous restores and saves drain their loop (idempotent).

    The quiet-fallback test in tests/test_damaged_checkpoints.py fails if an orbax upgrade
    routes around this function.
    """
    asyncio_utils._run_sync_via_new_loop = _run_sync_then_drain
