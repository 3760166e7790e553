"""`xlnet-jax eval`: held-out PLM loss and accuracy of a workdir's newest checkpoint."""

import jax
import ml_collections

from xlnet_jax import layout, optim, sharding, train
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
    _, abstract_state, _ = layout.build_state(config, model, optim.make_optimizer(config), mesh)
    checkpointer = Checkpointer(workdir, config)
    state = checkpointer.restore(abstract_state, config, fingerprint, move_damaged=False)
    checkpointer.close()
    if state is None:
        raise CheckpointError(f"{workdir} has no checkpoint to evaluate; train first.")
    evaluate = train.make_evaluator(config, model, mesh, manifest.path, abstract_state)
    result = evaluate(state.params)
    result["step"] = int(jax.device_get(state.step))
    result["unigram_entropy"] = unigram_entropy(manifest, config.vocab_size)
    writer = MetricsWriter(workdir, enabled=jax.process_index() == 0, subdir="eval")
    writer.write(
        result["step"], {"loss": result["loss"], "accuracy": result["accuracy"]}, kind="eval"
    )
    writer.close()
    return result
