"""Abstract NVIDIA devices from a card's facts, with no GPU: what `compile --gpu` compiles for.

XLA's GPU compiler takes a `GpuTargetConfigProto` (text form) in place of a present card;
`target_config` writes one from the table's `GpuSpec`, and `gpu_devices` asks jax's CUDA
plugin for COUNT such devices on one host. The plugin is the `gpu` extra. Its own CUDA
check looks for a driver first; a compile touches no GPU, so it is skipped.
"""

import functools
import importlib.util
import os

from xlnet_jax.errors import ConfigError, MissingDependencyError
from xlnet_jax.hardware.chips import Chip


def target_config(chip: Chip) -> str:
    """The text-format GpuTargetConfigProto of `chip`."""
    spec = chip.gpu
    if spec is None:
        raise ConfigError(f"{chip.name}: no target spec; `compile --gpu` cannot describe it.")
    major, minor = spec.compute_capability
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {spec.shared_memory_per_core}
  threads_per_core_limit: {spec.threads_per_core}
  core_count: {spec.cores}
  fpus_per_core: {spec.fpus_per_core}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {spec.memory_bandwidth}
  l2_cache_size: {spec.l2_cache_bytes}
  clock_rate_ghz: {spec.clock_ghz}
  device_memory_size: {chip.memory_bytes}
  shared_memory_per_block_optin: {spec.shared_memory_per_block_optin}
  cuda_compute_capability {{ major: {major} minor: {minor} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 10 patch: 0 }}
device_description_str: "{spec.description}"
"""


def cuda_plugin_installed() -> bool:
    """Whether jax's CUDA 12 plugin is importable (without any plugin, its namespace package
    `jax_plugins` is missing too, and find_spec raises instead of answering None)."""
    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:
        return False


@functools.cache
def gpu_devices(chip: Chip, count: int) -> tuple:
    """`count` abstract devices of `chip` on one host."""
    if not cuda_plugin_installed():
        raise MissingDependencyError(
            "compile --gpu needs jax's CUDA plugin, which is not installed: "
            "pip install -e '.[gpu]' (a deviceless compile needs only jax-cuda12-plugin, "
            "jax-cuda12-pjrt and nvidia-cuda-nvcc-cu12; see docs/gpus.md)."
        )
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    from jax.experimental import topologies

    desc = topologies.get_topology_desc(
        platform="cuda", target_config=target_config(chip), topology=f"1x1x{count}"
    )
    return tuple(desc.devices)
