"""What `compile` compiles for: a TPU slice (`--topology`) or NVIDIA cards (`--gpu`), as
abstract devices with each device's memory and peak, from the one chip table.

No accelerator is needed: libtpu describes TPU slices, jax's CUDA plugin describes cards
from their target specs (xlnet_jax.hardware).
"""

import dataclasses
import functools
import importlib.util
import os
import re

from xlnet_jax.errors import ConfigError, MissingDependencyError
from xlnet_jax.hardware import chips, gpus, slices

# The Triton kernel's lowest compute capability; `auto` takes the XLA path below it.
TRITON_MIN_CAPABILITY = (8, 0)


@dataclasses.dataclass(frozen=True)
class Target:
    """Devices to compile for, with what one device holds and computes."""

    name: str  # what the user passed; searches and reports repeat it
    description: str  # the report's first line
    devices: tuple
    memory_bytes: int  # per device
    peak_flops: float  # dense bf16 FLOP/s per device
    chip: chips.Chip
    xla_attention_only: bool = False  # the card cannot run the Triton kernel

    @property
    def notes(self) -> list[str]:
        if not self.xla_attention_only:
            return []
        major, minor = self.chip.gpu.compute_capability
        return [
            f"  {self.chip.name} is sm_{major}{minor}; the Triton kernel needs sm_80: "
            "attention_impl=auto takes the XLA path here"
        ]


def tpu_target(name: str, num_slices: int = 1) -> Target:
    """The devices of TPU slice `name` (Cloud type or libtpu topology), `num_slices` of them."""
    try:
        tpu = slices.parse_slice(name)
    except ConfigError as e:
        raise ConfigError(f"--topology: {e}") from None
    devices = _topology_devices(tpu.topology, num_slices)
    chip = chips.chip_for(devices[0].device_kind)
    if chip is None:
        kind = devices[0].device_kind
        raise ConfigError(f"--topology {name!r}: no chip table entry for {kind!r}.")
    # libtpu describes each TensorCore as a device where the chip has two (v2, v3, and v4
    # and v5p, whose AOT topologies are not megacore); they share the chip's HBM and peak.
    per_chip = len(devices) // (tpu.chips * num_slices)
    memory, peak = chip.memory_bytes // per_chip, chip.peak_tflops / per_chip
    times = f"{num_slices} x " if num_slices > 1 else ""
    description = (
        f"slice {times}{tpu.describe()}; {len(devices)} devices ({chip.name}), "
        f"{memory / chips.GIB:.1f} GiB HBM and {peak:g} TFLOP/s bf16 peak each"
    )
    return Target(
        name=name,
        description=description,
        devices=tuple(devices),
        memory_bytes=memory,
        peak_flops=peak * 1e12,
        chip=chip,
    )


def gpu_target(name: str) -> Target:
    """COUNT cards of `name` ("h100-80gb" or "h100-80gb:8") on one host."""
    match = re.fullmatch(r"([a-z0-9-]+)(?::([1-9]\d*))?", name)
    card = chips.gpu_card(match.group(1) if match else name)
    count = int(match.group(2) or 1)
    devices = gpus.gpu_devices(card, count)
    description = (
        f"gpu {count} x {card.gpu_name} ({card.name}) on one host: "
        f"{card.memory_bytes / chips.GIB:.1f} GiB and {card.peak_tflops:g} TFLOP/s bf16 "
        "peak each"
    )
    return Target(
        name=name,
        description=description,
        devices=tuple(devices),
        memory_bytes=card.memory_bytes,
        peak_flops=card.peak_tflops * 1e12,
        chip=card,
        xla_attention_only=card.gpu.compute_capability < TRITON_MIN_CAPABILITY,
    )


@functools.cache
def _topology_devices(topology: str, num_slices: int) -> tuple:
    """The TPU devices libtpu describes for `topology`, with no TPU attached."""
    if importlib.util.find_spec("libtpu") is None:
        raise MissingDependencyError(
            "compile needs libtpu, which is not installed: pip install -e '.[tpu]' "
            "(or scripts/venv.sh tpu)."
        )
    from jax.experimental import topologies

    # Compiling touches no TPU, so several compiles (tests, other users) may share libtpu.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        desc = topologies.get_topology_desc(
            platform="tpu", topology_name=topology, num_slices=num_slices
        )
    except Exception as e:  # noqa: BLE001 - libtpu's error types are not public
        raise ConfigError(f"--topology {topology!r}: libtpu cannot describe it ({e}).") from None
    return tuple(desc.devices)
