"""`xlnet-jax eval`: held-out PLM loss and accuracy of a workdir's newest checkpoint."""

import functools

import jax
import jax.numpy as jnp
import ml_collections

from xlnet_jax import layout, optim, sharding, steps, train
from xlnet_jax.checkpoint import Checkpointer, CheckpointError
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.corpus import unigram_entropy
from xlnet_jax.metrics_writer import MetricsWriter
from xlnet_jax.model import XLNetLM
from xlnet_jax.run_setup import load_corpus_manifest
from xlnet_jax.validate import validate_config


def evaluate_workdir(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Restores the newest checkpoint and evaluates eval_steps validation batches."""
    validate_config(config, jax.device_count())
    mesh = sharding.make_mesh(config)
    with sharding.activate(mesh, config.logical_axis_rules):
        return _evaluate(config, workdir, mesh)


def _evaluate(config: ml_collections.ConfigDict, workdir: str, mesh) -> dict:
    manifest, fingerprint = load_corpus_manifest(config)
    model = XLNetLM(ModelConfig.from_config(config))
    _, abstract_state, state_shardings = layout.build_state(
        config, model, optim.make_optimizer(config), mesh
    )
    checkpointer = Checkpointer(workdir, config)
    state = checkpointer.restore(abstract_state, config, fingerprint)
    checkpointer.close()
    if state is None:
        raise CheckpointError(f"{workdir} has no checkpoint to evaluate; train first.")
    shardings = layout.batch_shardings(mesh, config.logical_axis_rules)
    eval_fn = jax.jit(
        functools.partial(steps.eval_step, model=model, config=config),
        out_shardings=(state_shardings.mems, sharding.replicated(mesh)),
    )
    zero_mems = jax.jit(jnp.zeros_like, out_shardings=state_shardings.mems)(abstract_state.mems)
    result = train.evaluate(
        state.params,
        config,
        train.make_batcher(config, manifest.path, "validation", mesh),
        eval_fn,
        functools.partial(layout.to_global, shardings=shardings),
        zero_mems,
    )
    result["step"] = int(jax.device_get(state.step))
    result["unigram_entropy"] = unigram_entropy(manifest, config.vocab_size)
    writer = MetricsWriter(workdir, enabled=jax.process_index() == 0, subdir="eval")
    writer.write(
        result["step"], {"loss": result["loss"], "accuracy": result["accuracy"]}, kind="eval"
    )
    writer.close()
    return result
