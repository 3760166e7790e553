"""The one table of accelerators: each TPU generation and NVIDIA card, its memory and its peak.

`compile` reads it for the HBM a step must fit and the roofline step time; the train loop
reads it for the MFU denominator (`mfu_peak`). A chip is found from `jax.Device.device_kind`
by its `kind` pattern, first match in table order (more specific names first).

Figures: TPU HBM and dense bf16 peak per chip from Cloud TPU's system-architecture pages;
a TPU v2/v3 chip has two TensorCores and JAX shows each as a device, so a device gets half.
NVIDIA memory and the `GpuSpec` fields are the facts of XLA's own target specs
(openxla/xla xla/backends/gpu/target_config/specs/); dense bf16 peaks (no sparsity) from
NVIDIA's datasheets. V100 has no bf16 tensor cores: its figure is the fp16 one.
"""

import dataclasses
import re

from xlnet_jax.errors import ConfigError

GIB = 2**30


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """What XLA's GPU compiler needs to know of a card to compile for it without it."""

    compute_capability: tuple[int, int]
    cores: int  # streaming multiprocessors
    fpus_per_core: int
    threads_per_core: int
    clock_ghz: float
    memory_bandwidth: int  # bytes/s
    l2_cache_bytes: int
    shared_memory_per_core: int
    shared_memory_per_block_optin: int
    description: str  # the device_kind a real card reports


@dataclasses.dataclass(frozen=True, kw_only=True)
class Chip:
    """One TPU generation or NVIDIA card."""

    name: str  # as reports print it
    kind: str  # regex searched in jax.Device.device_kind
    memory_bytes: int  # HBM of one chip or card
    peak_tflops: float  # dense bf16 TFLOP/s of one chip or card
    devices_per_chip: int = 1  # JAX devices one chip shows (TPU v2/v3: its two cores)
    gpu: GpuSpec | None = None  # set for the cards `compile --gpu` can describe
    gpu_name: str = ""  # the --gpu name

    @property
    def memory_per_device(self) -> int:
        return self.memory_bytes // self.devices_per_chip

    @property
    def peak_tflops_per_device(self) -> float:
        return self.peak_tflops / self.devices_per_chip


def _hopper(*, description: str, cores: int, clock_ghz: float, bandwidth: int) -> GpuSpec:
    return GpuSpec(
        compute_capability=(9, 0),
        cores=cores,
        fpus_per_core=128,
        threads_per_core=2048,
        clock_ghz=clock_ghz,
        memory_bandwidth=bandwidth,
        l2_cache_bytes=52428800,
        shared_memory_per_core=233472,
        shared_memory_per_block_optin=232448,
        description=description,
    )


def _a100(*, description: str, bandwidth: int) -> GpuSpec:
    return GpuSpec(
        compute_capability=(8, 0),
        cores=108,
        fpus_per_core=64,
        threads_per_core=2048,
        clock_ghz=1.41,
        memory_bandwidth=bandwidth,
        l2_cache_bytes=41943040,
        shared_memory_per_core=167936,
        shared_memory_per_block_optin=166912,
        description=description,
    )


CHIPS = (
    Chip(name="TPU v2", kind=r"^TPU v2", memory_bytes=16 * GIB, peak_tflops=45.0,
         devices_per_chip=2),
    Chip(name="TPU v3", kind=r"^TPU v3", memory_bytes=32 * GIB, peak_tflops=123.0,
         devices_per_chip=2),
    Chip(name="TPU v4", kind=r"^TPU v4", memory_bytes=32 * GIB, peak_tflops=275.0),
    Chip(name="TPU v5e", kind=r"^TPU v5 ?(lite|e)", memory_bytes=16 * GIB, peak_tflops=197.0),
    Chip(name="TPU v5p", kind=r"^TPU v5", memory_bytes=95 * GIB, peak_tflops=459.0),
    Chip(name="TPU v6e", kind=r"^TPU v6 ?(lite|e)", memory_bytes=32 * GIB, peak_tflops=918.0),
    Chip(name="NVIDIA H100 PCIe", kind=r"H100 PCIe", memory_bytes=84942979072,
         peak_tflops=756.0, gpu_name="h100-pcie",
         gpu=_hopper(description="NVIDIA H100 PCIe", cores=114, clock_ghz=1.755,
                     bandwidth=2039040000000)),
    Chip(name="NVIDIA H100 NVL", kind=r"H100 NVL", memory_bytes=94 * 10**9, peak_tflops=835.0),
    Chip(name="NVIDIA H100 SXM 80GB", kind=r"H100", memory_bytes=84942979072,
         peak_tflops=989.4, gpu_name="h100-80gb",
         gpu=_hopper(description="NVIDIA H100 80GB HBM3", cores=132, clock_ghz=1.98,
                     bandwidth=3352320000000)),
    Chip(name="NVIDIA H200", kind=r"H200", memory_bytes=151397597184, peak_tflops=989.4,
         gpu_name="h200",
         gpu=_hopper(description="NVIDIA H200 141GB HBM3e", cores=132, clock_ghz=1.98,
                     bandwidth=4800000000000)),
    Chip(name="NVIDIA B200", kind=r"B200", memory_bytes=180 * 10**9, peak_tflops=2250.0),
    Chip(name="NVIDIA A100 80GB", kind=r"A100.*80GB", memory_bytes=85100068864,
         peak_tflops=312.0, gpu_name="a100-80gb",
         gpu=_a100(description="NVIDIA A100-SXM4-80GB", bandwidth=2039040000000)),
    Chip(name="NVIDIA A100 40GB", kind=r"A100", memory_bytes=42331013120, peak_tflops=312.0,
         gpu_name="a100-40gb",
         gpu=_a100(description="NVIDIA A100-SXM4-40GB", bandwidth=1555200000000)),
    Chip(name="NVIDIA RTX A6000", kind=r"A6000", memory_bytes=51041271808, peak_tflops=154.8,
         gpu_name="a6000",
         gpu=GpuSpec(compute_capability=(8, 6), cores=84, fpus_per_core=128,
                     threads_per_core=1536, clock_ghz=1.8, memory_bandwidth=768096000000,
                     l2_cache_bytes=6291456, shared_memory_per_core=102400,
                     shared_memory_per_block_optin=101376, description="NVIDIA RTX A6000")),
    Chip(name="NVIDIA V100 16GB", kind=r"V100", memory_bytes=16935682048, peak_tflops=125.0,
         gpu_name="v100",
         gpu=GpuSpec(compute_capability=(7, 0), cores=80, fpus_per_core=64,
                     threads_per_core=2048, clock_ghz=1.53, memory_bandwidth=898048000000,
                     l2_cache_bytes=6291456, shared_memory_per_core=98304,
                     shared_memory_per_block_optin=98304, description="Tesla V100-SXM2-16GB")),
    Chip(name="NVIDIA L40S", kind=r"L40S", memory_bytes=48 * 10**9, peak_tflops=362.0),
    Chip(name="NVIDIA L4", kind=r"\bL4\b", memory_bytes=24 * 10**9, peak_tflops=121.0),
)  # fmt: skip

GPUS = {chip.gpu_name: chip for chip in CHIPS if chip.gpu is not None}

# MFU's denominator on a device outside the table (a CPU): this project's CI machine's float32
# matmul peak on a quiet machine (~290 GFLOP/s, benchmarks/matmul_bound.py), a placeholder.
UNLISTED_PEAK_TFLOPS = 0.29


def chip_for(device_kind: str) -> Chip | None:
    """The table's chip for a `jax.Device.device_kind`, or None if it is not listed."""
    return next((chip for chip in CHIPS if re.search(chip.kind, device_kind)), None)


def datasheet_peak_tflops(device_kind: str) -> float | None:
    """The dense bf16 peak of one device of this kind, or None if the table lacks it."""
    chip = chip_for(device_kind)
    return chip.peak_tflops_per_device if chip else None


def gpu_card(name: str) -> Chip:
    """The card `compile --gpu NAME` describes; an unknown name is one line listing them."""
    if name not in GPUS:
        raise ConfigError(
            f"--gpu {name!r}: not a card this project can describe; known: {', '.join(GPUS)}"
        )
    return GPUS[name]


def local_device_kind() -> str:
    """The kind of this process's first device: the chip a run's MFU is measured against."""
    import jax

    return jax.local_devices()[0].device_kind


def mfu_peak(explicit_tflops: float, device_kind: str) -> tuple[float, str]:
    """(peak TFLOP/s of one device for MFU, the line saying where it comes from).

    `explicit_tflops` (config.peak_tflops_per_device) wins when set (> 0); else the table's
    figure for the device; else the labelled placeholder.
    """
    if explicit_tflops > 0:
        return explicit_tflops, (
            f"MFU against {explicit_tflops:g} TFLOP/s per device "
            f"(config.peak_tflops_per_device; the device is {device_kind})"
        )
    chip = chip_for(device_kind)
    if chip is None:
        return UNLISTED_PEAK_TFLOPS, (
            f"MFU against {UNLISTED_PEAK_TFLOPS:g} TFLOP/s per device, a placeholder: no "
            f"datasheet peak for {device_kind!r}; set --config.peak_tflops_per_device"
        )
    per = "per core" if chip.devices_per_chip > 1 else "per device"
    return chip.peak_tflops_per_device, (
        f"MFU against {chip.peak_tflops_per_device:g} TFLOP/s {per} ({chip.name} datasheet, "
        "dense bf16; override with --config.peak_tflops_per_device)"
    )
