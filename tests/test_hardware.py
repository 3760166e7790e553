"""The one chip table, TPU slice names in both forms, and MFU against the chip a run is on."""

import argparse
import sys

import pytest

from tests import test_data_common
from tests.train_config import get_config as train_config
from xlnet_jax.errors import ConfigError, MissingDependencyError
from xlnet_jax.hardware import chips, gpus, slices
from xlnet_jax.launch import names
from xlnet_jax.training import aot_devices, train
from xlnet_jax.training.metrics import read_metrics

# A device_kind each chip of the table really reports (jax.Device.device_kind).
DEVICE_KINDS = {
    "TPU v2": "TPU v2",
    "TPU v3": "TPU v3",
    "TPU v4": "TPU v4",
    "TPU v5e": "TPU v5 lite",
    "TPU v5p": "TPU v5",
    "TPU v6e": "TPU v6 lite",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL": "NVIDIA H100 NVL",
    "NVIDIA H100 SXM 80GB": "NVIDIA H100 80GB HBM3",
    "NVIDIA H200": "NVIDIA H200",
    "NVIDIA B200": "NVIDIA B200",
    "NVIDIA A100 80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 40GB": "NVIDIA A100-SXM4-40GB",
    "NVIDIA RTX A6000": "NVIDIA RTX A6000",
    "NVIDIA V100 16GB": "Tesla V100-SXM2-16GB",
    "NVIDIA L40S": "NVIDIA L40S",
    "NVIDIA L4": "NVIDIA L4",
}


def test_every_chip_is_found_by_its_device_kind_and_gives_mfu_its_peak():
    assert set(DEVICE_KINDS) == {chip.name for chip in chips.CHIPS}, "a chip without a kind here"
    for chip in chips.CHIPS:
        kind = DEVICE_KINDS[chip.name]
        assert chips.chip_for(kind) == chip, kind
        peak, note = chips.mfu_peak(0.0, kind)
        assert peak == chip.peak_tflops / chip.devices_per_chip
        assert chip.name in note and f"{peak:g} TFLOP/s" in note
        assert chip.memory_per_device * chip.devices_per_chip == chip.memory_bytes
    # A TPU v3 device is one of a chip's two cores; a card's description is its own kind.
    assert chips.mfu_peak(0.0, "TPU v3")[0] == 61.5
    for card in chips.GPUS.values():
        assert chips.chip_for(card.gpu.description) == card


@pytest.mark.parametrize(
    ("topology", "chip"),
    [("v2:2x2", "TPU v2"), ("v3:2x2", "TPU v3"), ("v4:2x2x1", "TPU v4"),
     ("v5e:2x2", "TPU v5e"), ("v5p:2x2x1", "TPU v5p"), ("v6e:2x2", "TPU v6e")],
)  # fmt: skip
def test_libtpu_devices_of_each_generation_find_their_chip(topology, chip):
    target = aot_devices.tpu_target(topology)
    assert target.chip.name == chip
    tpu = slices.parse_slice(topology)
    per_chip = len(target.devices) // tpu.chips  # 2 where libtpu shows each TensorCore
    assert len(target.devices) == tpu.chips * per_chip and per_chip in (1, 2)
    assert target.peak_flops == pytest.approx(target.chip.peak_tflops / per_chip * 1e12)
    assert target.memory_bytes == target.chip.memory_bytes // per_chip


def test_an_explicit_peak_wins_and_an_unlisted_device_gets_a_labelled_placeholder():
    assert chips.mfu_peak(100.0, "TPU v5 lite") == (
        100.0,
        "MFU against 100 TFLOP/s per device (config.peak_tflops_per_device; the device is "
        "TPU v5 lite)",
    )
    peak, note = chips.mfu_peak(0.0, "cpu")
    assert peak == chips.UNLISTED_PEAK_TFLOPS
    assert "placeholder" in note and "--config.peak_tflops_per_device" in note


@pytest.mark.parametrize(
    ("cloud", "topology", "hosts", "per_host"),
    [
        ("v2-8", "v2:2x2", 1, 4),
        ("v3-32", "v3:4x4", 4, 4),
        ("v3-2048", "v3:32x32", 256, 4),
        ("v4-8", "v4:2x2x1", 1, 4),
        ("v4-64", "v4:2x4x4", 8, 4),
        ("v4-128", "v4:4x4x4", 16, 4),
        ("v5litepod-1", "v5e:1x1", 1, 1),
        ("v5litepod-8", "v5e:2x4", 1, 8),
        ("v5litepod-16", "v5e:4x4", 4, 4),
        ("v5p-128", "v5p:4x4x4", 16, 4),
        ("v6e-64", "v6e:8x8", 16, 4),
    ],
)
def test_cloud_types_and_libtpu_topologies_name_the_same_slice(cloud, topology, hosts, per_host):
    for name in (cloud, topology):
        tpu = slices.parse_slice(name)
        assert (tpu.accelerator_type, tpu.topology) == (cloud, topology)
        assert (tpu.hosts, tpu.chips_per_host) == (hosts, per_host)
        assert cloud in tpu.describe() and topology in tpu.describe()


def test_v5e_is_also_a_cloud_prefix():
    assert slices.parse_slice("v5e-16").topology == "v5e:4x4"


@pytest.mark.parametrize("name", ["v4-63", "v4-12", "v9-8", "v4", "4x4", "v4:4x4", "v5e:2x2x1"])
def test_a_name_that_is_no_slice_is_one_line_listing_the_forms(name):
    with pytest.raises(ConfigError) as failure:
        slices.parse_slice(name)
    message = str(failure.value)
    assert "\n" not in message and repr(name) in message
    assert "v4-64" in message or "v4:2x4x4" in message or "axes" in message


def test_launch_takes_both_forms_and_gives_gcloud_the_cloud_type():
    assert names.accelerator_type("v4:2x4x4") == "v4-64"
    assert names.accelerator_type("v5litepod-16") == "v5litepod-16"
    assert names.accelerator_type("v5e-8") == "v5e-8"  # gcloud's own alias, passed as given
    assert names.accelerator_type("v9x-8") == "v9x-8"  # a generation newer than the table
    for bad in ("v4-63", "v4:4x4", "v3 32"):
        with pytest.raises(argparse.ArgumentTypeError):
            names.accelerator_type(bad)


def test_a_run_on_a_v5e_reports_mfu_against_the_v5e_peak(monkeypatch, tmp_path, capsys):
    """The train loop on this CPU, told that its device is a TPU v5e: the start line names
    the v5e's 197 TFLOP/s, and every metrics record's MFU is its TFLOP/s over 197."""
    monkeypatch.setattr(chips, "local_device_kind", lambda: "TPU v5 lite")
    config = train_config()
    config.update(num_train_steps=2, warmup_steps=1, checkpoint_every=2)
    config.corpus_dir = test_data_common.small_corpus()
    workdir = tmp_path / "v5e"
    train.train_and_evaluate(config, str(workdir))
    err = capsys.readouterr().err
    assert "MFU against 197 TFLOP/s per device (TPU v5e datasheet" in err
    assert err.count("MFU against") == 1
    records = [r for r in read_metrics(str(workdir)).values() if "mfu" in r]
    assert len(records) == 2
    for record in records:
        assert record["mfu"] == pytest.approx(record["tflops_per_device"] / 197.0, rel=1e-6)


def test_cards_below_sm80_take_the_xla_path_and_the_report_says_so(monkeypatch):
    """V100 is sm_70 and Triton needs sm_80 (the devices are not needed to decide it)."""
    monkeypatch.setattr(gpus, "gpu_devices", lambda card, count: ("device",) * count)
    v100, h100 = aot_devices.gpu_target("v100"), aot_devices.gpu_target("h100-80gb:8")
    assert v100.xla_attention_only and not h100.xla_attention_only
    assert v100.notes == [
        "  NVIDIA V100 16GB is sm_70; the Triton kernel needs sm_80: attention_impl=auto "
        "takes the XLA path here"
    ]
    assert len(h100.devices) == 8 and "8 x h100-80gb" in h100.description


def test_each_card_target_spec_carries_its_table_facts():
    for card in chips.GPUS.values():
        text = gpus.target_config(card)
        major, minor = card.gpu.compute_capability
        assert f"device_memory_size: {card.memory_bytes}" in text
        assert f"major: {major} minor: {minor}" in text
        assert f'device_description_str: "{card.gpu.description}"' in text


def test_with_no_jax_plugin_at_all_compile_gpu_names_the_gpu_extra(monkeypatch):
    """A venv without any jax plugin has no `jax_plugins` package: one line, no traceback."""
    monkeypatch.delitem(sys.modules, "jax_plugins.xla_cuda12", raising=False)
    monkeypatch.setitem(sys.modules, "jax_plugins", None)  # import of it fails, as when absent
    with pytest.raises(MissingDependencyError, match=r"pip install -e '\.\[gpu\]'"):
        gpus.gpu_devices(chips.gpu_card("h100-80gb"), 1)
