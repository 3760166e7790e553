"""`xlnet-jax compile --task_name T`: the fine-tuning step AOT-compiled for a TPU slice or
NVIDIA cards from a CPU, reported as pretraining's step is (training/aot.py), with the
search for the largest batch_size that fits (training/fit.py) when it does not.

The architecture comes from the config (set the source model's fields, e.g. configs/large.py's,
with --config.FIELD) since nothing is loaded; the batch is the task's shape (task.batch_spec):
RACE's rows are 4 options of seq_len each.
"""

import ml_collections
import numpy as np

from xlnet_jax.config import mesh_shape
from xlnet_jax.errors import UsageError
from xlnet_jax.finetune import config as finetune_config
from xlnet_jax.finetune.program import build
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.seeds import device_groups
from xlnet_jax.model import flops
from xlnet_jax.run.validate import validate_batch_layout
from xlnet_jax.training import aot, aot_devices, fit, sharding


def example_batch(task, config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
    """A batch of zeros of the task's shapes (batch_spec) and weight 1."""
    batch = {
        name: np.zeros((config.batch_size, *shape), dtype)
        for name, (shape, dtype) in task.batch_spec(config).items()
    }
    batch["weight"] = np.ones(config.batch_size, np.float32)
    return batch


def compile_step(
    config: ml_collections.ConfigDict, target, task_name: str, devices_per_seed: int = 0
):
    """(CompileReport, compiled or None) of the task's train step on `target`: on all its
    devices, or on its first `devices_per_seed` (a seed's share under --devices_per_seed)."""
    if isinstance(target, str):
        target = aot_devices.tpu_target(target, config.num_slices)
    finetune_config.validate(config)
    if target.xla_attention_only and config.attention_impl == "auto":
        config = config.copy_and_resolve_references()
        config.attention_impl = "xla"
    task = get_task(task_name)
    devices = list(target.devices)
    if devices_per_seed:
        devices = device_groups(devices, devices_per_seed)[0]
    data, fsdp, _ = mesh_shape(config, len(devices))
    validate_batch_layout(config, data * fsdp, bi_data=False)
    example = example_batch(task, config)
    rows_per_feature = int(np.prod(example["input_ids"].shape[2:-1], dtype=int))
    mesh = sharding.make_mesh(config, devices)
    labels = ["label"] * 2  # the head's width does not move the memory
    program = build(config, task, labels, mesh, example)
    model_flops = flops.finetune_flops_per_step(config, rows_per_feature) / len(devices)
    micro_rows = config.batch_size // config.grad_accum_steps // (data * fsdp)
    shape = dict(target=target, rows=micro_rows, seq_len=config.seq_len)
    try:
        with program.activate():
            lowered = program.train_step.lower(
                program.abstract_state, program.abstract_batch(example)
            )
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 - XLA reports out-of-memory as a runtime error
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return aot.out_of_memory_report(
            shape, e, model_flops, model_flops / target.peak_flops
        ), None
    return aot.memory_report(
        shape, compiled, model_flops, model_flops / target.peak_flops, target
    ), compiled


def compile_for(
    config: ml_collections.ConfigDict,
    task_name: str,
    *,
    topology: str | None,
    gpu: str | None,
    devices_per_seed: int = 0,
) -> int:
    """The CLI body for a fine-tuning config: report, and the largest fitting batch_size when
    the config's does not fit. Exit 0 iff it fits, 3 if not. With `devices_per_seed`, the
    step of one seed on that many devices, and how many seeds run side by side."""
    if (topology is None) == (gpu is None):
        raise UsageError("compile: give one of --topology (a TPU slice) or --gpu (NVIDIA cards).")
    with aot.libtpu_log_held():
        target = aot_devices.tpu_target(topology, config.num_slices) if topology else None
        target = target or aot_devices.gpu_target(gpu)
        step = lambda c, t: compile_step(c, t, task_name, devices_per_seed)  # noqa: E731
        report, _ = step(config, target)
        shape = example_batch(get_task(task_name), config)["input_ids"].shape[1:]
        print(
            f"fine-tuning {task_name}: a row of the batch is {int(np.prod(shape[1:-1]))} "
            f"sequence(s) x {shape[0]} segment(s) of {shape[-1]} tokens",
            flush=True,
        )
        if devices_per_seed:
            count = len(target.devices)
            print(
                f"--devices_per_seed {devices_per_seed}: one seed's step on {devices_per_seed} "
                f"of the {count} devices; {count // devices_per_seed} seeds run side by side",
                flush=True,
            )
        print(aot.format_report(report), flush=True)
        if not report.fits:
            print("\n".join(fit.what_fits(config, report, compile_step=step)))
    return 0 if report.fits else 3
