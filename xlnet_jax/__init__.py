"""xlnet-jax: XLNet pretraining in JAX/Flax.

One folder per idea; text flows text -> tokens -> streams -> batches -> step -> state ->
checkpoint. `LAYERS` is the import order, top to bottom: a module may import its own
package and the layers below it, never a layer above or a sibling package of its own layer
(tests/test_structure.py keeps this).
"""

LAYERS = (
    ("cli",),  # the `xlnet-jax` command line
    ("finetune",),  # fine-tuning tasks, their features, heads' losses, loop and metrics
    ("launch", "training"),  # pod and local-process launcher; the train loop, steps, compile
    ("run",),  # what checks and owns a run: config validation, workdir, lease, init_from
    ("checkpoint",),  # train state on storage: orbax steps, meta, checksums, HF weights
    ("objective",),  # the permutation-LM objective: orders, spans, targets, masks
    ("model", "data"),  # the network and its kernels; text to tokens to batch streams
    ("config", "paths", "hardware"),  # the config and mesh facts; paths; the chip table
    ("errors",),  # the one error family
)
