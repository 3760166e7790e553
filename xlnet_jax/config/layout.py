"""How a run divides its work: the mesh axes, the logical axis rules, and the data ranges.

`mesh_shape` sizes the (data, fsdp, tensor) mesh from config.mesh_*; `data_ranges` is the
number of ranges a new run on P processes reads its splits in (a resumed run keeps the
number its config.json recorded: training/run_config.with_data_ranges).
"""

import math

import ml_collections

from xlnet_jax.errors import MeshError

# Logical axis name -> mesh axes. Parameters and activations are annotated with the names
# on the left; flax skips a rule whose mesh axis an array already uses, so activations
# [batch, length, embed] put batch on (data, fsdp) and leave embed unsharded.
DEFAULT_AXIS_RULES = (
    ("batch", ("data", "fsdp")),
    ("layers", None),
    ("length", None),
    ("mem_length", None),
    ("targets", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
)

# The device mesh's axes, outermost first; config.mesh_* sizes them.
MESH_AXES = ("data", "fsdp", "tensor")

# config.data_ranges' default: one range per process when the run starts (data_ranges()).
AUTO_RANGES = 0


def data_ranges(config: ml_collections.ConfigDict, process_count: int) -> int:
    """The ranges a run that starts on `process_count` processes reads its splits in.

    An explicit config.data_ranges; for AUTO_RANGES the process count, so each host stages
    and caches 1/P of the corpus, or, where P does not divide the batch's streams (only
    when the tensor axis spans hosts), the largest number that divides both: each host
    then reads 1/R of it.
    """
    if config.data_ranges != AUTO_RANGES:
        return config.data_ranges
    streams = config.batch_size // 2 if config.bi_data else config.batch_size
    return math.gcd(process_count, streams)


def mesh_shape(config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int, int]:
    """Resolves the (data, fsdp, tensor) sizes, filling a single -1 with the remaining devices."""
    sizes = {"mesh_data": config.mesh_data, "mesh_fsdp": config.mesh_fsdp}
    sizes["mesh_tensor"] = config.mesh_tensor
    fills = [name for name, size in sizes.items() if size == -1]
    if len(fills) > 1:
        raise MeshError(f"config.{fills[1]}: at most one mesh axis may be -1 (got {fills}).")
    for name, size in sizes.items():
        if size == 0 or size < -1:
            raise MeshError(f"config.{name}: must be a positive size or -1 (got {size}).")
    known = math.prod(size for size in sizes.values() if size != -1)
    if fills:
        if num_devices % known:
            others = " x ".join(f"{name}={size}" for name, size in sizes.items() if size != -1)
            raise MeshError(
                f"config.{fills[0]}: cannot fill {num_devices} devices; the other mesh axes "
                f"{others} multiply to {known}, which does not divide {num_devices}."
            )
        sizes[fills[0]] = num_devices // known
    if math.prod(sizes.values()) != num_devices:
        raise MeshError(
            "config.mesh_data x mesh_fsdp x mesh_tensor = "
            f"{sizes['mesh_data']} x {sizes['mesh_fsdp']} x {sizes['mesh_tensor']} = "
            f"{math.prod(sizes.values())}, but there are {num_devices} devices; "
            "set one axis to -1 to fill."
        )
    return sizes["mesh_data"], sizes["mesh_fsdp"], sizes["mesh_tensor"]
