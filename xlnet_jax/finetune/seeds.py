"""`--seeds N`: N fine-tunings of one task, each with its own seed, then each result and the
median, as the XLNet paper reports GLUE (the median of 5 runs).

Each seed K (config.seed + k) runs in WORKDIR/seed_K, so each resumes on its own, and the
data is read and tokenized once for all of them. By default the seeds run one after another,
each on every device; the train step of the second onward comes from the compilation cache
(the programs differ only in their initial state).

With `devices_per_seed` D the devices are cut into groups of D, in order, and the groups run
side by side, one thread each (JAX dispatches from several threads, and each group's
programs run on its own devices): group g runs seeds k = g, g + G, ... one after another.
A seed's run is the one it would be alone on a mesh of D devices, the same program, so it
resumes, and ends, as that run does. SIGTERM and Ctrl-C reach the main thread, whose watcher
every group obeys: each saves its running seed and stops. A seed that fails stops the other
groups the same way, so its error comes at once, not after their runs.
"""

import concurrent.futures
import logging
import math
import statistics
from collections.abc import Sequence

import jax

from xlnet_jax import paths
from xlnet_jax.errors import UsageError
from xlnet_jax.finetune import outputs
from xlnet_jax.finetune.prepare import Inputs
from xlnet_jax.finetune.train import finetune
from xlnet_jax.run.validate import validate_batch_layout
from xlnet_jax.training import sharding
from xlnet_jax.training.preemption import Preemption, SavedAndInterrupted, StoppedBeforeEnd

log = logging.getLogger(__name__)

SEEDS_FILE = "seeds.json"
_WAIT_S = 0.5  # the main thread wakes this often, so its signal handlers run promptly
_STOPS = (StoppedBeforeEnd, SavedAndInterrupted)  # a save and stop asked for, not a failure


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


def device_groups(devices: Sequence[jax.Device], per_seed: int) -> list[list[jax.Device]]:
    """`devices` cut into consecutive groups of `per_seed`; a UsageError if they do not cut
    evenly."""
    if per_seed < 1 or len(devices) % per_seed:
        divisors = [d for d in range(1, len(devices) + 1) if len(devices) % d == 0]
        raise UsageError(
            f"--devices_per_seed {per_seed}: it must divide this host's {len(devices)} "
            f"devices; use one of {divisors}"
        )
    return [list(devices[i : i + per_seed]) for i in range(0, len(devices), per_seed)]


def finetune_seeds(
    inputs: Inputs,
    workdir: str,
    count: int,
    *,
    random_weights: bool = False,
    devices_per_seed: int = 0,
):
    """Runs `count` fine-tunings (seeds config.seed .. config.seed + count - 1), one after
    another on every device, or side by side on groups of `devices_per_seed` devices; writes
    WORKDIR/seeds.json with each result and the median, and returns that record."""
    base = inputs.config.seed
    runs = {}
    for k in range(count):
        config = inputs.config.copy_and_resolve_references()
        config.seed = base + k
        runs[base + k] = Inputs(**{**vars(inputs), "config": config})
    path = lambda seed: str(paths.as_path(workdir) / f"seed_{seed}")  # noqa: E731
    if not devices_per_seed:
        per_seed = {}
        for k, (seed, run) in enumerate(runs.items()):
            log.info("seed %d (%d of %d)", seed, k + 1, count)
            per_seed[seed] = finetune(run, path(seed), random_weights=random_weights)
    else:
        per_seed = _side_by_side(runs, path, random_weights, devices_per_seed)
    record = {"seeds": {str(s): r for s, r in per_seed.items()}, "median": median_results(per_seed)}
    outputs.write_json(workdir, SEEDS_FILE, record)
    return record


def _side_by_side(runs: dict, path, random_weights: bool, devices_per_seed: int) -> dict:
    """{seed: results} of `runs` on groups of `devices_per_seed` local devices, one thread a
    group. Every group finishes, or saves and stops, before an error or a stop is raised;
    a group's failure asks the others to save and stop."""
    groups = device_groups(jax.local_devices(), devices_per_seed)[: len(runs)]
    config = next(iter(runs.values())).config
    validate_batch_layout(
        config, sharding.num_data_shards(sharding.make_mesh(config, groups[0])), bi_data=False
    )
    seeds = list(runs)
    log.info(
        "%d seeds side by side on %d groups of %d devices (group g runs seeds g, g + %d, ...)",
        len(seeds), len(groups), devices_per_seed, len(groups),
    )  # fmt: skip
    preemption = Preemption()

    def run_group(g: int) -> dict:
        done = {}
        for seed in seeds[g :: len(groups)]:
            log.info("seed %d on devices %s", seed, [d.id for d in groups[g]])
            done[seed] = finetune(
                runs[seed], path(seed), random_weights=random_weights, devices=groups[g],
                preemption=preemption, prefix=f"seed {seed}: ",
            )  # fmt: skip
        return done

    try:
        with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
            futures = [pool.submit(run_group, g) for g in range(len(groups))]
            while (state := concurrent.futures.wait(futures, timeout=_WAIT_S)).not_done:
                if any(_failed(f) for f in state.done):
                    preemption.request("another seed failed")
    finally:
        preemption.restore()
    errors = [f.exception() for f in futures if f.exception() is not None]
    for error in sorted(errors, key=lambda e: isinstance(e, _STOPS)):  # a failure first
        raise error
    results = {}
    for future in futures:
        results.update(future.result())
    return {seed: results[seed] for seed in seeds}


def _failed(future: concurrent.futures.Future) -> bool:
    """Whether a finished group raised something other than a save and stop."""
    error = future.exception()
    return error is not None and not isinstance(error, _STOPS)
