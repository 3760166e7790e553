"""Before the first step, the attention kernel proves itself against the XLA path on the device.

A kernel that compiles may still compute something else on a real chip (a lowering that
differs from interpret mode, a race between warps, an out-of-bounds read that interpret mode
forgives), and a run would then train on wrong gradients. So before a run's first step
(`Program.compile_train_step`), the kernel runs once on a small problem at the run's own
widths: CHECK_LAYERS layers, CHECK_ROWS rows, the run's sequence layout, dtype, dropout and
dropatt, with a random memory. Its loss, new memory and gradients are compared with the XLA
path's on the same device, within `kernels.agreement.tolerance(dtype)` (gpu_check's).

Where it runs: on GPUs and TPUs (neither backend had run on real hardware when this was
written), on this process's first device of the mesh. Not on a CPU, where the kernel runs
interpreted: that is what the test suite compares with the XLA path, and "auto" keeps XLA
there anyway. Not in an AOT compile for a topology (`xlnet-jax compile`): no device to run on.

The verdict is cached per (device kind and platform version, jax and jaxlib versions, the
model and objective sources' hash, the check's config), one JSON file a verdict, under
$XLNET_JAX_KERNEL_CHECK_DIR, else $XDG_CACHE_HOME/xlnet_jax/kernel_check, else
~/.cache/xlnet_jax/kernel_check: on the host, so no gs:// workdir is needed, and a restart
on the same host does not pay again. Delete the file to check again.
"""

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import pathlib
import tempfile
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from xlnet_jax.config import ModelConfig
from xlnet_jax.data import batch_schema, tokenizer
from xlnet_jax.model import xlnet
from xlnet_jax.model.kernels import agreement
from xlnet_jax.model.kernels import mesh as kernel_mesh
from xlnet_jax.model.kernels.gpu import attention as gpu_attention
from xlnet_jax.objective import plm
from xlnet_jax.training import placement, sharding, steps

log = logging.getLogger(__name__)

CHECK_LAYERS = 2
CHECK_ROWS = 2
# Chips whose kernel is checked before it is trusted (see the module doc).
CHECKED_PLATFORMS = ("gpu", "tpu")
CACHE_ENV = "XLNET_JAX_KERNEL_CHECK_DIR"
# The sources whose change may change what the kernel or the XLA path computes.
_SOURCES = ("model", "objective")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether the kernel agreed; `detail` names the worst difference or the failure."""

    ok: bool
    detail: str
    seconds: float


def failure(config: ml_collections.ConfigDict, mesh: Mesh) -> str | None:
    """None when the kernel is not in use here, not checked here, or agrees with the XLA
    path; else one line naming the worst difference (or the crash, or the non-finite value).

    A pass is logged as one info line with its time (or the cache it came from). With several
    processes, every one checks its own device and all take the kernel only if all agree.
    """
    with sharding.activate(mesh, config.logical_axis_rules):
        chip = kernel_mesh.target_device()
        kernel = xlnet.uses_kernel(ModelConfig.from_config(config))
    local = set(jax.local_devices())
    device = next((d for d in mesh.devices.flat if d in local), None)
    if not kernel or device is None or chip.platform not in CHECKED_PLATFORMS:
        return None
    small = check_config(config)
    path = cache_path(small, device)
    verdict = _read(path)
    fresh = verdict is None
    if fresh:
        verdict = run_check(small, device)
        _write(path, verdict)
    if jax.process_count() > 1:
        everyone = multihost_utils.process_allgather(np.int32(verdict.ok))
        if verdict.ok and not np.all(everyone):
            return "another process's check of the kernel failed (see its log)"
    if not verdict.ok:
        return f"{verdict.detail} (verdict cached in {path}: delete it to check again)"
    log.info(
        "attention kernel: agrees with the XLA path on %s (%s; %d layers, %d rows, %s, "
        "dropatt %g), %s; verdict cached in %s",
        device.device_kind, verdict.detail, CHECK_LAYERS, CHECK_ROWS, small.dtype,
        small.dropatt, f"checked in {verdict.seconds:.1f} s" if fresh else "checked before",
        path,
    )  # fmt: skip
    return None


def check_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The check's problem: the run's config at CHECK_LAYERS layers and CHECK_ROWS rows."""
    small = config.copy_and_resolve_references()
    small.update(n_layer=CHECK_LAYERS, batch_size=CHECK_ROWS)
    return small


def run_check(config: ml_collections.ConfigDict, device: jax.Device) -> Verdict:
    """The kernel against the XLA path on `device`: loss, new memory and gradients."""
    start = time.perf_counter()
    tolerance = agreement.tolerance(config.dtype)
    # float32 means float32 (no TF32 on a GPU); a bfloat16 kernel keeps its default (Mosaic
    # rejects a bfloat16 matmul at "highest": "Bad lhs type").
    precision = "highest" if config.dtype == "float32" else "default"
    with jax.default_device(device), jax.default_matmul_precision(precision):
        params, batch, mems = _inputs(config, device)
        try:  # the kernel first: a crash needs no reference
            actual = loss_and_grads(config, "pallas", params, batch, mems)
        except Exception as e:  # noqa: BLE001 - Mosaic's, Triton's and XLA's errors are not public
            lines = str(e).strip().splitlines() or [type(e).__name__]
            seconds = time.perf_counter() - start
            return Verdict(False, f"the kernel failed to run: {lines[0][:300]}", seconds)
        expected = loss_and_grads(config, "xla", params, batch, mems)
    worst = max(
        (*agreement.worst_leaf(actual[i], expected[i]), name)
        for i, name in enumerate(("loss", "new memory", "gradients"))
    )
    difference, leaf, name = worst
    at = f" at {leaf}" if leaf else ""
    seconds = time.perf_counter() - start
    if not np.isfinite(difference):
        return Verdict(False, f"the kernel's {name} is not finite{at}", seconds)
    detail = (
        f"worst difference {difference:.2e} of the largest entry, in the {name}{at}; "
        f"tolerance {tolerance:.2e}"
    )
    return Verdict(difference <= tolerance, detail, seconds)


def _inputs(config: ml_collections.ConfigDict, device: jax.Device) -> tuple:
    """(params, batch, memory) of the check, on `device`: fresh params, a batch with the
    stream layout (reuse + A <sep> B <sep> <cls>), a random memory (distinct keys)."""
    model = xlnet.XLNetLM(ModelConfig.from_config(config))
    one_device = Mesh(np.asarray([device]).reshape(1, 1, 1), sharding.MESH_AXES)
    init, _, _ = placement.build_state(config, model, optax.identity(), one_device)
    rng = np.random.default_rng(config.seed)
    rows, length = config.batch_size, config.seq_len
    ids = rng.integers(len(tokenizer.SPECIAL_IDS), config.vocab_size, (rows, length))
    end_of_a = (length + config.reuse_len) // 2
    ids[:, [end_of_a, -2]] = tokenizer.SEP_ID
    ids[:, -1] = tokenizer.CLS_ID
    seg = np.zeros((rows, length), np.int32)
    seg[:, end_of_a + 1 : -1] = 1
    seg[:, -1] = 2
    batch = batch_schema.pack(
        input_ids=ids,
        seg_ids=seg,
        is_word_start=rng.random((rows, length)) < 0.7,
        is_functional=np.isin(ids, [tokenizer.SEP_ID, tokenizer.CLS_ID]),
        is_backward=(np.arange(rows) % 2 == 1) & config.bi_data,
    )
    mem_shape = (config.n_layer, rows, config.mem_len, config.d_model)
    mems = jax.random.normal(jax.random.key(config.seed), mem_shape, jnp.float32)
    return init().params, jax.device_put(batch, device), mems


def loss_and_grads(config, impl: str, params, batch: dict, mems) -> tuple:
    """(loss, new memory, gradients) of the train step's forward and backward through
    attention_impl `impl`, with dropout on, as host arrays: the kernel check's, and
    benchmarks/gpu_check.py's. The PLM sample and the dropout come from config.seed."""
    config = config.copy_and_resolve_references()
    config.attention_impl = impl
    model = xlnet.XLNetLM(ModelConfig.from_config(config))
    plm_key, dropout_key = jax.random.split(jax.random.key(config.seed))

    @jax.jit
    def run(params):
        sample = steps.sample_targets(batch, plm_key, config)

        def mean_nll(params):
            terms, new_mems = steps.forward(
                model, params, batch, sample, mems, dropout_key, config.reuse_len,
                deterministic=False,
            )  # fmt: skip
            return terms[0] / terms[1], new_mems

        (loss, new_mems), grads = jax.value_and_grad(mean_nll, has_aux=True)(params)
        return loss, new_mems, grads

    return jax.device_get(run(params))


# ----------------------------------------------------------------------------- the cache


def cache_dir() -> pathlib.Path:
    """Where verdicts live (see the module doc)."""
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "xlnet_jax" / "kernel_check"


@functools.cache
def source_hash() -> str:
    """sha256 of the model and objective packages' sources (the kernel and the XLA path)."""
    root = pathlib.Path(xlnet.__file__).parents[1]
    digest = hashlib.sha256()
    for package in _SOURCES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(config: ml_collections.ConfigDict, device: jax.Device) -> dict:
    """What the verdict depends on: chip, software, sources and the check's problem."""
    kernel = config.copy_and_resolve_references()
    kernel.attention_impl = "pallas"
    return dict(
        device=device.device_kind,
        platform_version=device.client.platform_version,
        jax=jax.__version__,
        jaxlib=importlib.metadata.version("jaxlib"),
        sources=source_hash(),
        model=dataclasses.asdict(ModelConfig.from_config(kernel)),
        objective=dataclasses.asdict(plm.PLMConfig.from_config(kernel)),
        rows=CHECK_ROWS,
        gpu_tiles=repr(gpu_attention.GPU_TILES),
    )


def cache_path(config: ml_collections.ConfigDict, device: jax.Device) -> pathlib.Path:
    """The verdict file of (config, device): its key's hash names it."""
    key = json.dumps(cache_key(config, device), sort_keys=True)
    return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _read(path: pathlib.Path) -> Verdict | None:
    """The cached verdict, or None (absent or unreadable: the check runs again)."""
    try:
        return Verdict(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write(path: pathlib.Path, verdict: Verdict) -> None:
    """Caches the verdict (atomically); a host that cannot write it only checks again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
            json.dump(dataclasses.asdict(verdict), f)
        os.replace(f.name, path)
    except OSError as e:
        log.warning("attention kernel: cannot cache the check's verdict in %s (%s)", path, e)
