"""The program: one function from (config, mesh) to everything that runs on the mesh.

Training, `xlnet-jax eval`, `xlnet-jax compile`, the benchmarks and the tests all get their
model, optimiser, state layout and jitted steps from `build_program`, so an AOT compile or
a benchmark runs exactly the program that trains. A new switch (an attention
implementation, a remat policy, a profiler hook) has this one place to go.
"""

import dataclasses
import functools
import logging
import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.config import ModelConfig, data_ranges
from xlnet_jax.data import mixture
from xlnet_jax.data.streams import StreamBatcher
from xlnet_jax.errors import ConfigError
from xlnet_jax.model.xlnet import XLNetLM
from xlnet_jax.training import kernel_check, optim, placement, replicas, sharding, steps

log = logging.getLogger(__name__)

# How a failure to compile the Pallas kernel reads: Mosaic and libtpu on a TPU; Triton, its
# PTX assembler or a tile over the shared memory on an NVIDIA GPU (XLA's own words, Triton's
# OutOfResources, or the CUDA plugin's compile handler on jax >= 0.11).
_KERNEL_FAILURE = re.compile(
    r"Mosaic failed|LLO_CHECK|MosaicError|Triton|ptxas|shared memory|OutOfResources",
    re.IGNORECASE,
)


def _first_line(error: Exception) -> str:
    """The first line of an error that names the kernel failure (libtpu prefixes warnings)."""
    lines = str(error).splitlines()
    return next((line for line in lines if _KERNEL_FAILURE.search(line)), lines[0])[:300]


def compile_checked(program, compile_step: Callable, use_xla: Callable[[], None]):
    """`compile_step()`, trusted only once the attention kernel is proven on this device:
    pretraining's and fine-tuning's programs compile their train steps through here.

    `program` has the run's `config` and `mesh`; `use_xla()` moves it (config, model and
    steps) to the XLA attention path. A failure to compile the kernel for this device is,
    with attention_impl "pallas", a ConfigError naming attention_impl, not a compiler
    traceback; with "auto", one warning line, and the step compiled on the XLA path
    instead. A kernel that compiles then proves itself on the device
    (training/kernel_check.py: GPUs and TPUs) before it is trusted: a disagreement with the
    XLA path is handled the same way.
    """
    compiled = _compile_or_fall_back(program, compile_step, use_xla)
    disagreement = kernel_check.failure(program.config, program.mesh)
    if disagreement is None:
        return compiled
    chip = program.mesh.devices.flat[0].device_kind
    if program.config.attention_impl == "pallas":
        raise ConfigError(
            "config.attention_impl='pallas': the attention kernel disagrees with the XLA "
            f"path on {chip}: {disagreement}; set --config.attention_impl=xla, and please "
            "report the config and chip."
        )
    log.warning(
        "attention_impl='auto': the attention kernel disagrees with the XLA path on %s: "
        "%s; training on the XLA attention path instead (--config.attention_impl=xla "
        "skips the kernel; please report the config and chip).",
        chip,
        disagreement,
    )
    use_xla()
    return compile_step()


def _compile_or_fall_back(program, compile_step: Callable, use_xla: Callable[[], None]):
    """The compiled train step; on a kernel compile failure, "pallas" stops and "auto"
    moves to the XLA attention path (compile_checked's doc)."""
    try:
        return compile_step()
    except Exception as e:  # noqa: BLE001 - Mosaic's, libtpu's and XLA's errors are not public
        if program.config.attention_impl == "xla" or not _KERNEL_FAILURE.search(str(e)):
            raise
        failure = f"{program.mesh.devices.flat[0].device_kind} ({_first_line(e)})"
        if program.config.attention_impl == "pallas":
            raise ConfigError(
                "config.attention_impl='pallas': the Pallas attention kernel does not "
                f"compile for {failure}; set --config.attention_impl=xla, and please "
                "report the config and chip."
            ) from None
    log.warning(
        "attention_impl='auto': the attention kernel does not compile for %s; training "
        "on the XLA attention path instead (--config.attention_impl=xla skips this try; "
        "please report the config and chip).",
        failure,
    )
    use_xla()
    return compile_step()


@dataclasses.dataclass
class Program:
    """The model, its optimiser and the jitted steps, laid out over one mesh.

    Frozen but for one change: `compile_train_step` (compile_checked) moves an
    attention_impl="auto" program whose kernel does not compile for the device, or
    disagrees with the XLA path on it, to the XLA attention path (config, model and both
    steps), so that training and evaluation go on without the kernel.

    Attributes:
      config: the run's config.
      mesh: the device mesh everything is sharded over.
      model: the Flax module.
      tx: the optax optimiser; schedule: its learning-rate schedule.
      init_state: () -> a fresh TrainState, created directly in its shardings.
      abstract_state: shapes, dtypes and shardings of the TrainState (for restore and AOT).
      state_shardings: the TrainState's NamedShardings.
      batch_shardings: the global batch's NamedShardings, per field.
      abstract_batch: shapes, dtypes and shardings of the global batch.
      train_step: jitted (state, batch) -> (state, metrics); the state is donated.
      eval_step: jitted (params, mems, batch, key) -> (mems, (nll, count, correct)).
    """

    config: ml_collections.ConfigDict
    mesh: Mesh
    model: XLNetLM
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    init_state: Callable[[], TrainState]
    abstract_state: TrainState
    state_shardings: TrainState
    batch_shardings: dict
    abstract_batch: dict
    train_step: Callable
    eval_step: Callable

    def activate(self):
        """The mesh and logical axis rules under which the steps must be traced."""
        return sharding.activate(self.mesh, self.config.logical_axis_rules)

    def compile_train_step(self):
        """The train step lowered for the abstract state and batch, and compiled (AOT),
        with the kernel's compile fallback and agreement check (compile_checked)."""
        return compile_checked(self, self._compile_train_step, self._use_xla_attention)

    def _compile_train_step(self):
        with self.activate():
            lowered = self.train_step.lower(self.abstract_state, self.abstract_batch)
        return lowered.compile()

    def _use_xla_attention(self) -> None:
        """This program's config, model and steps replaced by those of attention_impl="xla"
        (the same params, state layout and batch: only the attention's computation moves)."""
        config = self.config.copy_and_resolve_references()
        config.attention_impl = "xla"
        xla = build_program(config, self.mesh)
        self.config, self.model = xla.config, xla.model
        self.train_step, self.eval_step = xla.train_step, xla.eval_step

    def zero_mems(self) -> jax.Array:
        """A recurrence memory of zeros, in the state's memory sharding."""
        zeros = jax.jit(jnp.zeros_like, out_shardings=self.state_shardings.mems)
        return zeros(self.abstract_state.mems)

    def put_batch(self, local_batch: dict) -> dict:
        """This process's rows of a batch -> global arrays in the batch shardings."""
        return placement.to_global(local_batch, self.batch_shardings)

    def batcher(self, corpus_dir: str, split: str) -> StreamBatcher:
        """The stream batcher of this process's rows of `split`, for this mesh's data shards.

        `corpus_dir` is one corpus, or a mixture's (staged) corpora comma-separated, as
        preflight.check_run_from names them; a mixture's shares come from
        config.corpus_weights / corpus_alpha, its names from config.corpus_dir (the user's
        spelling, not the staged copies'), and the train batcher logs one line per corpus.
        """
        config = self.config
        dirs = mixture.corpus_dirs(corpus_dir)
        weights, alpha = mixture.weights_and_alpha(config) if len(dirs) > 1 else (None, 0.0)
        named = mixture.corpus_dirs(config.corpus_dir) if config.corpus_dir else dirs
        batcher = StreamBatcher(
            dirs,
            split,
            seq_len=config.seq_len,
            reuse_len=config.reuse_len,
            global_batch=config.batch_size,
            bi_data=config.bi_data,
            seed=config.seed,
            next_sentence_prob=config.next_sentence_prob,
            num_data_shards=sharding.num_data_shards(self.mesh),
            # train and eval resolve it first (run_config.with_data_ranges)
            data_ranges=data_ranges(config, jax.process_count()),
            process_index=jax.process_index(),
            process_count=jax.process_count(),
            corpus_weights=weights,
            corpus_alpha=alpha,
            names=mixture.corpus_names(named if len(named) == len(dirs) else dirs),
        )
        if len(dirs) > 1 and split == "train" and jax.process_index() == 0:
            shown = named if len(named) == len(dirs) else None
            for line in batcher.describe(config.num_train_steps, shown):
                log.info("Mixture: %s", line)
        return batcher


def build_program(config: ml_collections.ConfigDict, mesh: Mesh) -> Program:
    """Builds the model, optimiser, state layout and jitted steps of `config` on `mesh`.

    Nothing is traced or compiled here: the steps trace on first call (under
    `Program.activate`) or through `Program.compile_train_step`.
    """
    model = XLNetLM(ModelConfig.from_config(config))
    platform = mesh.devices.flat[0].platform
    if config.attention_impl == "pallas" and platform not in ("tpu", "gpu", "cpu"):
        raise ConfigError(
            f"config.attention_impl='pallas': the attention kernel has TPU (Mosaic) and NVIDIA "
            f"GPU (Triton) backends only, and would run interpreted on {platform}; set "
            "--config.attention_impl=xla (or auto)."
        )
    cores, zero = config.get("pretrain_clip_replicas", 0), "one global clip"
    if problem := replicas.share_problem(config, "pretrain_clip_replicas", cores, zero):
        raise ConfigError(problem)
    tx = optim.make_optimizer(config)
    schedule = optim.learning_rate_schedule(config)
    init_state, abstract_state, state_shardings = placement.build_state(config, model, tx, mesh)
    batch_shardings = placement.batch_shardings(mesh, config.logical_axis_rules)
    replicated = sharding.replicated(mesh)
    shares = NamedSharding(mesh, P(("data", "fsdp")))  # the per-core clip's shares
    train_step = jax.jit(
        functools.partial(
            steps.train_step,
            model=model,
            tx=tx,
            schedule=schedule,
            config=config,
            share_sharding=shares,
        ),
        in_shardings=(state_shardings, batch_shardings),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )
    eval_step = jax.jit(
        functools.partial(steps.eval_step, model=model, config=config),
        out_shardings=(state_shardings.mems, replicated),
    )
    return Program(
        config=config,
        mesh=mesh,
        model=model,
        tx=tx,
        schedule=schedule,
        init_state=init_state,
        abstract_state=abstract_state,
        state_shardings=state_shardings,
        batch_shardings=batch_shardings,
        abstract_batch=placement.abstract_batch(config, batch_shardings),
        train_step=train_step,
        eval_step=eval_step,
    )
