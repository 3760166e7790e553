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
from xlnet_jax.training import sharding
from xlnet_jax.training.optim import learning_rate_schedule
from xlnet_jax.training.placement import place_state


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
    """The encoder's view of a fine-tuning config: memory only between segments of a text."""
    model = ModelConfig.from_config(config)
    mem_len = config.mem_len if config.num_segments > 1 else 0
    return dataclasses.replace(model, mem_len=mem_len, reuse_len=0, bi_data=False)


def _loss(task: Task, module, params, batch, *, deterministic, dropout_key=None):
    outputs = apply_segments(
        module,
        params,
        {k: batch[k] for k in INPUT_KEYS},
        deterministic=deterministic,
        dropout_key=dropout_key,
        network_inputs={k: batch[k] for k in task.network_inputs},
    )
    weight = batch["weight"]
    per_feature = task.loss(outputs, batch)
    return jnp.sum(per_feature * weight) / jnp.maximum(jnp.sum(weight), 1.0), outputs


def train_step(state: TrainState, batch: dict, *, task, module, tx, schedule):
    """One AdamW step on the batch's mean loss; a non-finite loss or gradient skips it."""
    dropout_key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    loss_fn = functools.partial(
        _loss, task, module, batch=batch, deterministic=False, dropout_key=dropout_key
    )
    (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
    new_state = state.replace(
        step=state.step + 1,
        params=keep(params, state.params),
        opt_state=keep(opt_state, state.opt_state),
        skipped_steps=state.skipped_steps + (~finite).astype(jnp.int32),
    )
    metrics = {
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step),
        "finite": finite.astype(jnp.float32),
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
      put_batch: host arrays -> global arrays with rows over the data axes.
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

    def put_batch(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return {k: jax.device_put(v, self.batch_sharding) for k, v in batch.items()}

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
        functools.partial(train_step, task=task, module=module, tx=tx, schedule=schedule),
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
        config, task, labels, module, mesh, tx, init, abstract, step, predict, batch_sharding
    )
