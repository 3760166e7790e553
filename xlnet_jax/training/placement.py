"""Where everything lives on the mesh: the sharded train state and the global batch.

The state is created directly in its sharding (shapes and logical axes from eval_shape,
init jitted with out_shardings), so no device ever holds all of it.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.data import batch_schema
from xlnet_jax.model.xlnet import XLNetLM
from xlnet_jax.training import sharding


def _dummy_inputs(config: ml_collections.ConfigDict, batch: int):
    """Zero inputs of the model's shapes, for init and shape inference."""
    length, targets = config.seq_len, config.num_predict
    return (
        jnp.zeros((batch, length), jnp.int32),
        jnp.zeros((batch, length), jnp.int32),
        jnp.zeros((batch, length, length), jnp.bool_),
        jnp.zeros((batch, targets), jnp.int32),
        jnp.zeros((config.n_layer, batch, config.mem_len, config.d_model), jnp.float32),
        jnp.zeros((batch,), jnp.bool_),
    )


def build_state(config: ml_collections.ConfigDict, model: XLNetLM, tx, mesh):
    """Returns (init_fn, abstract_state, state_shardings); init_fn makes the state in place.

    The state is never materialised whole on one device: shapes and logical axes come from
    eval_shape, and init runs under jit with the mesh shardings as out_shardings.
    """
    rules = config.logical_axis_rules

    def boxed_state():
        params_key, state_key = jax.random.split(jax.random.PRNGKey(config.seed))
        params = model.init(params_key, *_dummy_inputs(config, 1), deterministic=True)["params"]
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=tx.init(params),
            mems=jnp.zeros(
                (config.n_layer, config.batch_size, config.mem_len, config.d_model), jnp.float32
            ),
            rng=jax.random.key_data(state_key),
            skipped_steps=jnp.zeros((), jnp.int32),
        )

    mems = jax.sharding.PartitionSpec("layers", "batch", "mem_length", "embed")
    return place_state(boxed_state, mesh, rules, mems)


def place_state(boxed_state, mesh, rules, mems_spec):
    """(init_fn, abstract_state, state_shardings) of the TrainState `boxed_state` builds with
    boxed (logically annotated) params: shardings from the logical axes of its eval_shape and
    `mems_spec` for the memory; init jitted with them as out_shardings."""
    specs = nn.get_partition_spec(jax.eval_shape(boxed_state)).replace(mems=mems_spec)
    shardings = sharding.logical_shardings(specs, mesh, rules)
    init = jax.jit(lambda: nn.meta.unbox(boxed_state()), out_shardings=shardings)
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        jax.eval_shape(init),
        shardings,
    )
    return init, abstract, shardings


def batch_shardings(mesh, rules) -> dict:
    """Shardings of the global batch, from each field's logical axes (rows over data shards)."""
    return {
        name: sharding.logical_sharding(mesh, rules, *field.axes)
        for name, field in batch_schema.FIELDS.items()
    }


def abstract_batch(config: ml_collections.ConfigDict, shardings: dict) -> dict:
    """Shapes, dtypes and shardings of the global batch, for AOT compilation."""
    return {
        name: jax.ShapeDtypeStruct(
            batch_schema.shape(field, config.batch_size, config.seq_len),
            field.dtype,
            sharding=shardings[name],
        )
        for name, field in batch_schema.FIELDS.items()
    }


def to_global(local_batch: dict, shardings: dict) -> dict:
    """This process's rows -> global arrays laid out over the mesh."""
    return {
        name: jax.make_array_from_process_local_data(shardings[name], value)
        for name, value in local_batch.items()
    }
