"""The device mesh (data, fsdp, tensor) and logical-axis shardings from the config's rules."""

import contextlib
import math

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xlnet_jax.errors import MeshError

MESH_AXES = ("data", "fsdp", "tensor")


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


def make_mesh(config: ml_collections.ConfigDict, devices=None) -> Mesh:
    """Builds the mesh; with num_slices > 1 the data axis spans slices over DCN."""
    devices = jax.devices() if devices is None else devices
    shape = mesh_shape(config, len(devices))
    if config.num_slices > 1:
        if shape[0] % config.num_slices:
            raise MeshError(
                f"config.num_slices: {config.num_slices} slices must divide the data axis "
                f"({shape[0]})."
            )
        per_slice = (shape[0] // config.num_slices, shape[1], shape[2])
        grid = mesh_utils.create_hybrid_device_mesh(
            per_slice, (config.num_slices, 1, 1), devices=devices
        )
    else:
        try:
            grid = mesh_utils.create_device_mesh(shape, devices=devices)
        except (AssertionError, NotImplementedError, ValueError):
            grid = np.asarray(devices).reshape(shape)
    return Mesh(grid, MESH_AXES)


def num_data_shards(mesh: Mesh) -> int:
    """How many ways the batch is split (data x fsdp)."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def logical_shardings(tree, mesh: Mesh, rules):
    """NamedShardings for a pytree of logical PartitionSpecs (from nn.get_partition_spec)."""
    return nn.logical_to_mesh_sharding(tree, mesh, tuple(rules))


def logical_sharding(mesh: Mesh, rules, *names) -> NamedSharding:
    """The NamedSharding of one array whose dimensions carry these logical names."""
    return NamedSharding(mesh, nn.logical_to_mesh_axes(names, tuple(rules)))


def replicated(mesh: Mesh) -> NamedSharding:
    """A sharding that puts a copy on every device (scalars, small host values)."""
    return NamedSharding(mesh, P())


@contextlib.contextmanager
def activate(mesh: Mesh, rules):
    """The mesh and logical axis rules under which the model's sharding constraints apply.

    Trace (jit, lower) the steps inside this context: outside it flax drops every
    `nn.with_logical_constraint` silently.
    """
    with jax.set_mesh(mesh), nn.logical_axis_rules(tuple(rules)):
        yield
