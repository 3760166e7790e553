"""Checkpoints read on one device, whatever mesh saved them: for export, eval and tests."""

import logging

import jax
import ml_collections
import orbax.checkpoint as ocp

from xlnet_jax import paths
from xlnet_jax.checkpoint import orbax_adapter, tensorstore_adapter
from xlnet_jax.checkpoint.checksums import verify_checksums
from xlnet_jax.checkpoint.meta import DamagedStep
from xlnet_jax.config import from_saved
from xlnet_jax.errors import CheckpointError, one_line


def read_checkpoint(workdir: str, step: int | None = None) -> dict:
    """A checkpoint's items on this process's first device, whatever mesh saved them.

    Returns {"step", "state", "mems", "meta"}, checked against the saved checksums; for
    export, inspection and tests. Any unreadable or damaged file is a CheckpointError.
    """
    directory = paths.as_path(workdir) / "checkpoints"
    if not directory.is_dir():
        raise CheckpointError(f"{workdir} holds no checkpoints/ directory; is it a train workdir?")
    tensorstore_adapter.use_gcs_retries(paths.retry_policy())
    orbax_adapter.drain_sync_loops()  # a damaged file gives one error line, no tracebacks
    # orbax warns about every read-only manager (and each read_only default it overrides):
    # reading is what this function is for, so neither is news to the user.
    absl_log = logging.getLogger("absl")
    level = absl_log.level
    absl_log.setLevel(logging.ERROR)
    try:
        manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(
                read_only=True, save_interval_steps=0, create=False
            ),
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "mems": ocp.StandardCheckpointHandler(),
                "meta": ocp.JsonCheckpointHandler(),
            },
        )
    finally:
        absl_log.setLevel(level)
    try:
        step = manager.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"{directory} holds no finished checkpoint yet.")
        try:
            restored = _restore_on_one_device(manager, step)
        except Exception as e:  # noqa: BLE001 - unreadable, missing or malformed files
            raise CheckpointError(
                f"{directory / str(step)} cannot be read ({one_line(e)}); pick another step "
                "or restore it from a backup."
            ) from None
    finally:
        manager.close()
    meta = restored["meta"]
    try:
        if not isinstance(meta, dict):
            raise DamagedStep("meta is not an xlnet-jax checkpoint's")
        checksums = meta.get("checksums", {})
        verify_checksums(restored["state"], checksums.get("state"), "state")
        if "mems" in restored:  # mem_len 0 saves no memory
            verify_checksums(restored["mems"]["mems"], checksums.get("mems"), "mems")
    except DamagedStep as e:
        raise CheckpointError(f"{directory / str(step)} is damaged: {e}.") from None
    return {
        "step": step,
        "state": restored["state"],
        "mems": restored["mems"]["mems"] if "mems" in restored else None,
        "meta": meta,
    }


def _restore_on_one_device(manager: ocp.CheckpointManager, step: int) -> dict:
    """Every item of `step`, its arrays placed on this process's first device."""
    here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    metadata = manager.item_metadata(step)
    args = {
        item: ocp.args.StandardRestore(
            jax.tree.map(
                lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=here), metadata[item]
            )
        )
        for item in ("state", "mems")
        if metadata.get(item) is not None  # mem_len 0 saves no memory
    }
    return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore(), **args))


def load_trained_params(workdir: str) -> tuple[ml_collections.ConfigDict, dict, int]:
    """The config, params and step of a workdir's newest checkpoint (export, init_from)."""
    checkpoint = read_checkpoint(workdir)
    return (
        from_saved(checkpoint["meta"]["config"]),
        checkpoint["state"]["params"],
        checkpoint["step"],
    )
