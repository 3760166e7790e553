"""The device mesh (data, fsdp, tensor) and logical-axis shardings from the config's rules."""

import contextlib

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xlnet_jax.config import MESH_AXES, mesh_shape
from xlnet_jax.errors import MeshError


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
