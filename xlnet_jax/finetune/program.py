"""The fine-tuning program: a task's module, its optimiser, the state on the mesh, and the
jitted train and predict steps (the loop, `compile` and the benchmark share it).

The batch's rows are split over the data axes of the mesh; parameters follow the model's
logical axes as in pretraining. The train step is a pure function of (state, batch): its
dropout key is fold_in(rng, step), so a resumed run repeats an uninterrupted one exactly.
"""

import dataclasses
import functools
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.config import ModelConfig
from xlnet_jax.finetune import optim
from xlnet_jax.finetune.forward import apply_segments
from xlnet_jax.finetune.task import INPUT_KEYS, Task
from xlnet_jax.training import accumulate, sharding, steps
from xlnet_jax.training import replicas as replicas_lib
from xlnet_jax.training.optim import learning_rate_schedule
from xlnet_jax.training.placement import place_state
from xlnet_jax.training.program import compile_checked


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
    """The encoder's view of a fine-tuning config: memory only between segments of a text."""
    model = ModelConfig.from_config(config)
    mem_len = config.mem_len if config.num_segments > 1 else 0
    return dataclasses.replace(model, mem_len=mem_len, reuse_len=0, bi_data=False)


def _loss(
    task: Task,
    module,
    params,
    batch,
    *,
    deterministic,
    dropout_key=None,
    total_weight=None,
    mem_gradient=False,
):
    """(the rows' weighted loss sum over max(total_weight, 1), the head's outputs): the
    rows' weighted mean loss unless `total_weight` (the whole batch's or share's weight, of
    which these rows are a micro-batch) says otherwise. mem_gradient: as
    forward.apply_segments."""
    outputs = apply_segments(
        module,
        params,
        {k: batch[k] for k in INPUT_KEYS},
        deterministic=deterministic,
        dropout_key=dropout_key,
        network_inputs={k: batch[k] for k in task.network_inputs},
        mem_gradient=mem_gradient,
    )
    weight = batch["weight"]
    total = jnp.sum(weight) if total_weight is None else total_weight
    per_feature = task.loss(outputs, batch)
    return jnp.sum(per_feature * weight) / jnp.maximum(total, 1.0), outputs


def micro_key(key: jax.Array, index, micro_batches: int) -> jax.Array:
    """Micro-batch `index`'s dropout key: the step's own with one micro-batch (so a run
    without accumulation draws what it always drew), else fold_in(key, index)."""
    return key if micro_batches == 1 else jax.random.fold_in(key, index)


def batch_gradients(loss_fn: Callable, params, batch: dict, key, micro_batches: int = 1):
    """(loss, gradient) of the batch's weighted mean loss, summed over `micro_batches`
    micro-batches (training/accumulate.py): each one's loss is its weighted sum over the
    whole batch's weight, so the sums are the batch's mean and its gradient.

    loss_fn(params, rows, key, total_weight) -> (loss, aux), as _loss."""
    total = jnp.sum(batch["weight"])
    grad_fn = jax.value_and_grad(lambda p, rows, k: loss_fn(p, rows, k, total)[0])

    def micro(index, rows):
        return grad_fn(params, rows, micro_key(key, index, micro_batches)), None

    init = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
    (loss, grads), _ = accumulate.sum_over(micro, init, accumulate.split(batch, micro_batches))
    return loss, grads


def replica_gradients(
    loss_fn: Callable,
    params,
    batch: dict,
    key,
    replicas: int,
    clip_norm: float,
    sharding: NamedSharding | None = None,
    micro_batches: int = 1,
):
    """(loss, unclipped gradient, clipped gradient) as the original's TPU step over
    `replicas` cores makes them (training/replicas.py, pretraining's per-core clip too):
    each share's mean is over its features' weights (batch["weight"]); replica r of a
    micro-batch drops out with fold_in(micro_key, r). loss_fn(params, rows, key,
    total_weight) -> (loss, aux), as _loss; `sharding` is the batch's."""
    loss, raw, clipped, _ = replicas_lib.replica_gradients(
        lambda p, rows, k, total: (loss_fn(p, rows, k, total)[0], None),
        params,
        batch,
        batch["weight"],
        lambda index: micro_key(key, index, micro_batches),
        replicas,
        clip_norm,
        sharding,
        micro_batches,
    )
    return loss, raw, clipped


def train_step(
    state: TrainState,
    batch: dict,
    *,
    task,
    module,
    tx,
    schedule,
    replicas: int | None = None,
    clip_norm: float = 0.0,
    sharding: NamedSharding | None = None,
    micro_batches: int = 1,
    mem_gradient: bool = False,
):
    """One optimiser step on the batch's mean loss; a non-finite loss, gradient or update
    skips it, reported in the `nonfinite` metric as pretraining's (steps.guard_update).

    The gradient is summed over `micro_batches` micro-batches (config.grad_accum_steps),
    each with its own dropout key; the loss and gradient norm are the whole batch's.
    replicas None: tx clips the batch's gradient (clip_scope "global"); else the gradient is
    clipped per replica share as the original's TPU step over `replicas` cores
    (replica_gradients, with the batch's sharding; optim.clip_replicas gives the count,
    which need not be the mesh's). mem_gradient: as forward.apply_segments.
    """
    dropout_key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)

    def loss_fn(params, rows, key, total_weight):
        return _loss(
            task, module, params, rows, deterministic=False, dropout_key=key,
            total_weight=total_weight, mem_gradient=mem_gradient,
        )  # fmt: skip

    if replicas is None:
        loss, grads = batch_gradients(loss_fn, state.params, batch, dropout_key, micro_batches)
        grad_norm = optax.tree.norm(grads)
    else:
        loss, raw, grads = replica_gradients(
            loss_fn, state.params, batch, dropout_key, replicas, clip_norm, sharding,
            micro_batches,
        )  # fmt: skip
        grad_norm = optax.tree.norm(raw)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    nonfinite = steps.nonfinite_code(loss, grad_norm, optax.tree.norm(updates))
    new_state = steps.guard_update(
        state,
        nonfinite,
        params=optax.apply_updates(state.params, updates),
        opt_state=opt_state,
        mems=state.mems,  # a placeholder: no memory between fine-tuning steps
    )
    metrics = {
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step),
        "nonfinite": nonfinite,
        "skipped_steps": new_state.skipped_steps,
    }
    return new_state, metrics


def predict_step(params, batch: dict, *, task, module):
    """(summed weighted loss, summed weight, outputs) of one batch, without dropout."""
    loss, outputs = _loss(task, module, params, batch, deterministic=True)
    weight = jnp.sum(batch["weight"])
    return loss * jnp.maximum(weight, 1.0), weight, outputs


@dataclasses.dataclass
class FinetuneProgram:
    """Everything that runs on the mesh for one task and config.

    Attributes:
      init_state: params_key_source -> a fresh TrainState in its shardings (see build).
      abstract_state: shapes, dtypes and shardings of the state (restore, AOT).
      train_step: jitted (state, batch) -> (state, metrics); the state is donated.
      predict_step: jitted (params, batch) -> (loss sum, weight sum, outputs).
      put_batch: host arrays of the whole batch -> global arrays with rows over the data axes.
      host_rows, put_rows: the rows of a batch this process holds, and those rows alone ->
        the global arrays (every process gives its own; the multi-host loop).
      example: one feature of the task's batch (its shapes, for AOT compiles).
    """

    config: ml_collections.ConfigDict
    task: Task
    labels: list[str]
    module: nn.Module
    mesh: Mesh
    tx: optax.GradientTransformation
    init_state: Callable[[], TrainState]
    abstract_state: TrainState
    train_step: Callable
    predict_step: Callable
    batch_sharding: NamedSharding
    example: dict

    def compile_train_step(self):
        """The train step compiled for the state and batch layout (AOT) through
        pretraining's compile_checked: the kernel's compile fallback and its agreement
        check on the device hold for fine-tuning too."""
        return compile_checked(self, self._compile_train_step, self._use_xla_attention)

    def _compile_train_step(self):
        rows = self.config.batch_size
        batch = {
            k: jax.ShapeDtypeStruct((rows, *v.shape[1:]), v.dtype, sharding=self.batch_sharding)
            for k, v in self.example.items()
        }
        with self.activate():
            return self.train_step.lower(self.abstract_state, batch).compile()

    def _use_xla_attention(self) -> None:
        """This program's config, module and steps replaced by those of attention_impl
        "xla" (the same params, state layout and batch)."""
        config = self.config.copy_and_resolve_references()
        config.attention_impl = "xla"
        xla = build(config, self.task, self.labels, self.mesh, self.example)
        self.config, self.module = xla.config, xla.module
        self.train_step, self.predict_step = xla.train_step, xla.predict_step

    def put_batch(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return {k: jax.device_put(v, self.batch_sharding) for k, v in batch.items()}

    def host_rows(self, batch_size: int) -> np.ndarray:
        """The positions in a batch of `batch_size` rows that this process's devices hold, in
        order (every position in a single-process run)."""
        shards = self.batch_sharding.addressable_devices_indices_map((batch_size,)).values()
        held = {row for index in shards for row in range(*index[0].indices(batch_size))}
        return np.array(sorted(held), dtype=np.int64)

    def put_rows(self, rows: dict[str, np.ndarray], batch_size: int) -> dict[str, jax.Array]:
        """Global arrays of a batch of `batch_size` rows from this process's rows of it (the
        host_rows positions, in that order): each device takes its shard from them."""
        positions = self.host_rows(batch_size)

        def put(value: np.ndarray) -> jax.Array:
            def shard(index: tuple) -> np.ndarray:
                wanted = np.arange(batch_size)[index[0]]
                return value[np.searchsorted(positions, wanted)]

            shape = (batch_size, *value.shape[1:])
            return jax.make_array_from_callback(shape, self.batch_sharding, shard)

        return {k: put(v) for k, v in rows.items()}

    def activate(self):
        return sharding.activate(self.mesh, self.config.logical_axis_rules)

    def abstract_batch(self, example: dict[str, np.ndarray]) -> dict:
        """A batch's shapes (from one host batch) with their shardings, for AOT compiles."""
        return {
            k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=self.batch_sharding)
            for k, v in example.items()
        }


def build(
    config: ml_collections.ConfigDict, task: Task, labels: list[str], mesh: Mesh, example: dict
) -> FinetuneProgram:
    """The program of `task` under `config` on `mesh`; `example` is one host batch (shapes).

    Nothing is compiled here; the steps trace on first call under `activate()`.
    """
    model = model_config(config)
    module = task.module(model, labels)
    tx = optim.make_optimizer(config, model.n_layer)
    replicas = optim.clip_replicas(config, mesh.shape["data"] * mesh.shape["fsdp"])
    schedule = learning_rate_schedule(config)
    rows = example["input_ids"][:1, 0]  # [1, *rows, L]: one feature's first segment
    flat = rows.reshape(-1, rows.shape[-1])[:1]
    extras = {k: jnp.asarray(example[k][:1]) for k in task.network_inputs}

    def boxed_state():
        params_key, state_key = jax.random.split(jax.random.PRNGKey(config.seed))
        empty = jnp.zeros((model.n_layer, 1, 0, model.d_model)), jnp.zeros((1, 0), bool)
        params = module.init(
            params_key, jnp.asarray(flat), jnp.zeros_like(flat), jnp.zeros(flat.shape, bool),
            *empty, deterministic=True, **extras,
        )["params"]  # fmt: skip
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=tx.init(params),
            # No memory between steps in fine-tuning (one placeholder: orbax saves no
            # empty array); a text's memory lives within one step (forward.py).
            mems=jnp.zeros((1,), jnp.float32),
            rng=jax.random.key_data(state_key),
            skipped_steps=jnp.zeros((), jnp.int32),
        )

    init, abstract, shardings = place_state(boxed_state, mesh, config.logical_axis_rules, P())
    batch_sharding = NamedSharding(mesh, P(("data", "fsdp")))
    replicated = sharding.replicated(mesh)
    step = jax.jit(
        functools.partial(
            train_step,
            task=task,
            module=module,
            tx=tx,
            schedule=schedule,
            replicas=replicas,
            clip_norm=config.clip_norm,
            sharding=batch_sharding,
            micro_batches=config.grad_accum_steps,
            mem_gradient=config.mem_gradient,
        ),
        in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, replicated),
        donate_argnums=0,
    )
    predict = jax.jit(
        functools.partial(predict_step, task=task, module=module),
        in_shardings=(shardings.params, batch_sharding),
        out_shardings=(replicated, replicated, replicated),
    )
    return FinetuneProgram(
        config, task, labels, module, mesh, tx, init, abstract, step, predict, batch_sharding,
        example,
    )  # fmt: skip
