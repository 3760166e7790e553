"""Config validation that runs before anything compiles: one line naming field and constraint.

Each check raises ConfigError at once; within `collecting(problems)` the field checks append
their line to `problems` instead, so preflight.py can report every problem in one go.
"""

import contextlib
import contextvars

import ml_collections

from xlnet_jax.config import AUTO_RANGES, ModelConfig, mesh_shape
from xlnet_jax.data.tokenizer import SPECIAL_IDS
from xlnet_jax.errors import ConfigError, MeshError
from xlnet_jax.model.xlnet import validate_model_config
from xlnet_jax.objective.plm import PLMConfig, validate_plm_config
from xlnet_jax.run.fields import field_problem, nonfinite_problem
from xlnet_jax.run.working_values import batch_advice, plm_advice, range_advice

NUM_SPECIAL_IDS = len(SPECIAL_IDS)


_COLLECTED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "collected", default=None
)


@contextlib.contextmanager
def collecting(problems: list[str]):
    """Within the block, a failed field check appends its line to `problems`, not raises."""
    token = _COLLECTED.set(problems)
    try:
        yield
    finally:
        _COLLECTED.reset(token)


def _check(ok: bool, field: str, constraint: str, value, advice: str = "") -> None:
    if ok:
        return
    message = f"config.{field}: {constraint} (got {value!r}){advice}."
    problems = _COLLECTED.get()
    if problems is None:
        raise ConfigError(message)
    problems.append(message)


def validate_training_fields(c: ml_collections.ConfigDict) -> None:
    """Optimiser, loop and data fields: the relations that do not depend on devices.

    Each field's own range is its declaration's (config/fields.py), checked first by
    field_problem; the model's and the objective's relations by validate_model_config and
    validate_plm_config, which validate_config runs before this.
    """
    _check(
        c.vocab_size >= NUM_SPECIAL_IDS,
        "vocab_size",
        f"must hold at least the {NUM_SPECIAL_IDS} special pieces",
        c.vocab_size,
    )
    _check(
        c.warmup_steps <= c.num_train_steps,
        "warmup_steps",
        f"must not exceed num_train_steps={c.num_train_steps}",
        c.warmup_steps,
    )
    validate_accumulation(c)
    streams = c.batch_size // 2 if c.bi_data else c.batch_size
    _check(
        c.data_ranges == AUTO_RANGES or (c.data_ranges >= 1 and streams % c.data_ranges == 0),
        "data_ranges",
        f"must be {AUTO_RANGES} (the process count) or >= 1 and divide the {streams} streams "
        "of a batch (batch_size" + (", halved with bi_data)" if c.bi_data else ")"),
        c.data_ranges,
        range_advice(streams, c.data_ranges),
    )


def validate_accumulation(c: ml_collections.ConfigDict) -> None:
    """The global batch must split into grad_accum_steps micro-batches (pretraining and
    fine-tuning)."""
    _check(
        c.batch_size % c.grad_accum_steps == 0,
        "batch_size",
        f"must be divisible by grad_accum_steps={c.grad_accum_steps}",
        c.batch_size,
        batch_advice(lambda b: b % c.grad_accum_steps == 0, c.batch_size),
    )


def batch_splits(
    c: ml_collections.ConfigDict, data_shards: int, batch_size: int, bi_data: bool
) -> bool:
    """Whether `batch_size` splits evenly over micro-batches and data shards (evenly in
    pairs per shard with bi_data)."""
    if batch_size % c.grad_accum_steps:
        return False
    micro = batch_size // c.grad_accum_steps
    if micro % data_shards:
        return False
    per_shard, micro_per_shard = batch_size // data_shards, micro // data_shards
    return not bi_data or (per_shard % 2 == 0 and micro_per_shard % 2 == 0)


def validate_batch_layout(
    c: ml_collections.ConfigDict, data_shards: int, *, bi_data: bool | None = None
) -> None:
    """The global batch must split evenly over data shards and micro-batches (pretraining
    and fine-tuning); with bi_data (default: the config's; fine-tuning passes False, it has
    no reversed streams) in pairs per shard."""
    bi_data = c.bi_data if bi_data is None else bi_data
    micro = c.batch_size // c.grad_accum_steps
    advice = batch_advice(lambda b: batch_splits(c, data_shards, b, bi_data), c.batch_size)
    _check(
        micro % data_shards == 0,
        "batch_size",
        f"the micro-batch batch_size/grad_accum_steps={micro} must divide over the "
        f"{data_shards} data shards (mesh data x fsdp)",
        c.batch_size,
        advice,
    )
    if bi_data:
        per_shard = c.batch_size // data_shards
        _check(
            per_shard % 2 == 0 and (micro // data_shards) % 2 == 0,
            "bi_data",
            f"needs an even batch per data shard; batch_size={c.batch_size} over "
            f"{data_shards} shards with grad_accum_steps={c.grad_accum_steps} gives "
            f"{micro // data_shards} rows per shard per micro-batch",
            c.bi_data,
            advice,
        )


def validate_config(c: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
    """Checks every field; with num_devices also the mesh and the batch split over it."""
    problem = field_problem(c)
    if problem:
        raise ConfigError(problem)
    try:
        validate_model_config(ModelConfig.from_config(c))
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"config.{e}") from None
    plm = PLMConfig.from_config(c)
    try:
        validate_plm_config(plm)
    except ValueError as e:
        raise ConfigError(f"config.{e}{plm_advice(plm)}.") from None
    validate_training_fields(c)
    problem = nonfinite_problem(c)
    if problem:
        raise ConfigError(problem)
    if num_devices is not None:
        try:
            data, fsdp, _ = mesh_shape(c, num_devices)
        except MeshError as e:
            raise ConfigError(str(e)) from None
        validate_batch_layout(c, data * fsdp)
        tensor = num_devices // (data * fsdp)
        _check(
            c.n_head % tensor == 0,
            "mesh_tensor",
            f"the tensor axis ({tensor}) must divide n_head={c.n_head}",
            c.mesh_tensor,
        )
