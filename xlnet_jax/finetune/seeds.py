"""`--seeds N`: N fine-tunings of one task, each with its own seed, then each result and the
median, as the XLNet paper reports GLUE (the median of 5 runs).

The runs share the host one after another: each uses every device of the mesh in turn, in
WORKDIR/seed_K (K = config.seed + k), so each resumes on its own, and the data is read and
tokenized once for all of them. The train step of the second run onward comes from the
compilation cache (the programs differ only in their initial state).
"""

import logging
import math
import statistics

from xlnet_jax import paths
from xlnet_jax.finetune import outputs
from xlnet_jax.finetune.loop import finetune
from xlnet_jax.finetune.prepare import Inputs

log = logging.getLogger(__name__)

SEEDS_FILE = "seeds.json"


def median(values: list[float]) -> float:
    """The median; NaN if a value is not finite (a NaN has no place in an order)."""
    return statistics.median(values) if all(map(math.isfinite, values)) else math.nan


def median_results(per_seed: dict[int, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """{split: {metric: median over the seeds}}."""
    first = next(iter(per_seed.values()))
    return {
        split: {
            metric: median([result[split][metric] for result in per_seed.values()])
            for metric in metrics
        }
        for split, metrics in first.items()
    }


def finetune_seeds(inputs: Inputs, workdir: str, count: int, *, random_weights: bool = False):
    """Runs `count` fine-tunings (seeds config.seed .. config.seed + count - 1); writes
    WORKDIR/seeds.json with each result and the median, and returns that record."""
    base = inputs.config.seed
    per_seed = {}
    for k in range(count):
        seed = base + k
        config = inputs.config.copy_and_resolve_references()
        config.seed = seed
        run = Inputs(**{**vars(inputs), "config": config})
        log.info("seed %d (%d of %d)", seed, k + 1, count)
        per_seed[seed] = finetune(run, str(paths.as_path(workdir) / f"seed_{seed}"),
                                  random_weights=random_weights)  # fmt: skip
    record = {"seeds": {str(s): r for s, r in per_seed.items()}, "median": median_results(per_seed)}
    outputs.write_json(workdir, SEEDS_FILE, record)
    return record
