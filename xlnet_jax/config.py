"""The one config object: defaults for every field, and the model's frozen view of it.

Presets in `configs/` start from `default_config()` and change what differs. The same
ConfigDict flows through data, objective, model, training and checkpoints.
"""

import dataclasses
import math

import ml_collections

from xlnet_jax.errors import MeshError

# Logical axis name -> mesh axes. Parameters and activations are annotated with the names
# on the left; flax skips a rule whose mesh axis an array already uses, so activations
# [batch, length, embed] put batch on (data, fsdp) and leave embed unsharded.
DEFAULT_AXIS_RULES = (
    ("batch", ("data", "fsdp")),
    ("layers", None),
    ("length", None),
    ("mem_length", None),
    ("targets", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
)


# The device mesh's axes, outermost first; config.mesh_* sizes them.
MESH_AXES = ("data", "fsdp", "tensor")

# config.data_ranges' default: one range per process when the run starts (data_ranges()).
AUTO_RANGES = 0


def data_ranges(config: ml_collections.ConfigDict, process_count: int) -> int:
    """The ranges a run that starts on `process_count` processes reads its splits in.

    An explicit config.data_ranges; 1 for a config saved before the field existed; for
    AUTO_RANGES the process count, so each host stages and caches 1/P of the corpus, or,
    where P does not divide the batch's streams (only when the tensor axis spans hosts),
    the largest number that divides both: each host then reads 1/R of it.
    """
    ranges = config.get("data_ranges", 1)
    if ranges != AUTO_RANGES:
        return ranges
    streams = config.batch_size // 2 if config.bi_data else config.batch_size
    return math.gcd(process_count, streams)


def mesh_shape(config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int, int]:
    """Resolves the (data, fsdp, tensor) sizes, filling a single -1 with the remaining devices."""
    sizes = {"mesh_data": config.mesh_data, "mesh_fsdp": config.mesh_fsdp}
    sizes["mesh_tensor"] = config.mesh_tensor
    fills = [name for name, size in sizes.items() if size == -1]
    if len(fills) > 1:
        raise MeshError(f"config.{fills[1]}: at most one mesh axis may be -1 (got {fills}).")
    for name, size in sizes.items():
        if size == 0 or size < -1:
            raise MeshError(f"config.{name}: must be a positive size or -1 (got {size}).")
    known = math.prod(size for size in sizes.values() if size != -1)
    if fills:
        if num_devices % known:
            others = " x ".join(f"{name}={size}" for name, size in sizes.items() if size != -1)
            raise MeshError(
                f"config.{fills[0]}: cannot fill {num_devices} devices; the other mesh axes "
                f"{others} multiply to {known}, which does not divide {num_devices}."
            )
        sizes[fills[0]] = num_devices // known
    if math.prod(sizes.values()) != num_devices:
        raise MeshError(
            "config.mesh_data x mesh_fsdp x mesh_tensor = "
            f"{sizes['mesh_data']} x {sizes['mesh_fsdp']} x {sizes['mesh_tensor']} = "
            f"{math.prod(sizes.values())}, but there are {num_devices} devices; "
            "set one axis to -1 to fill."
        )
    return sizes["mesh_data"], sizes["mesh_fsdp"], sizes["mesh_tensor"]


def default_config() -> ml_collections.ConfigDict:
    """Every field with its default; the `tiny` shape unless a preset overrides it."""
    c = ml_collections.ConfigDict()

    # --- Model (Transformer-XL with two-stream relative attention) ---
    c.vocab_size = 32000  # SentencePiece vocabulary size; must equal the tokenizer's.
    c.d_model = 128  # Hidden width.
    c.n_layer = 2  # Number of Transformer-XL layers.
    c.n_head = 4  # Attention heads.
    c.d_head = 32  # Width of one head; released models use d_model // n_head.
    c.d_inner = 512  # Feed-forward inner width.
    c.ff_activation = "gelu"  # Feed-forward activation: "gelu" or "relu".
    c.untie_r = True  # Per-layer r_w/r_r/r_s biases (True) or one set shared by all layers.
    c.dropout = 0.1  # Dropout on hidden states.
    c.dropatt = 0.1  # Dropout on attention probabilities.
    c.initializer_range = 0.02  # Stddev of the normal init of kernels and embeddings.
    c.layer_norm_eps = 1e-12  # LayerNorm epsilon (post-LN, as the original).
    c.clamp_len = -1  # Clip relative distances to +-clamp_len; -1 keeps them all.
    c.bi_data = False  # Half of each data shard's rows are the same streams reversed.
    c.dtype = "float32"  # Compute dtype: "float32" or "bfloat16"; params stay float32.
    c.remat = False  # Rematerialise each layer in the backward pass to save memory.
    c.scan_unroll = 1  # Layers per scan iteration; >= n_layer unrolls all (faster, longer compile).
    # Attention: "xla" (reference), "pallas" (fused kernel: Mosaic on TPU, Triton on NVIDIA
    # GPUs), "auto" (pallas when the step is traced for a TPU or a GPU, else xla). Not in
    # checkpoints.
    c.attention_impl = "auto"

    # --- Sequence layout and the permutation-LM objective ---
    c.seq_len = 128  # Tokens per row: reuse block + A <sep> B <sep> <cls>.
    c.reuse_len = 64  # Leading tokens of a row that become the next step's memory.
    c.mem_len = 96  # Memory length per layer carried across steps; 0 disables memory.
    c.perm_size = 64  # Factorization orders are shared by blocks of this many tokens.
    c.num_predict = 21  # Targets per row (fixed count; ~seq_len / 6).
    c.mask_alpha = 6  # Context tokens per span = span_len * mask_alpha / mask_beta.
    c.mask_beta = 1  # See mask_alpha.
    c.max_span = 5  # Longest span in words; p(n) is proportional to 1/n.
    c.next_sentence_prob = 0.5  # Probability that B is the true continuation of A.

    # --- Data ---
    c.corpus_dir = ""  # Output of `xlnet-jax prepare`; empty means WORKDIR/corpus (built-in).
    # Contiguous ranges of each split's shards, each a ring of its own streams; a host stages
    # and caches only its rows' ranges: a multiple or divisor of the process count that
    # divides the batch's streams (1: read whole), or AUTO_RANGES, the process count when
    # the run starts (data_ranges()), recorded in the run's config.json so that a resume on
    # another process count reads the same batches.
    c.data_ranges = AUTO_RANGES

    # --- Optimisation (AdamW, linear warmup then linear decay) ---
    c.batch_size = 16  # Global batch (rows per step, all hosts together).
    c.grad_accum_steps = 1  # Micro-batches per step; batch_size must divide by it.
    c.num_train_steps = 300  # Total optimiser steps.
    c.learning_rate = 1e-3  # Peak learning rate.
    c.warmup_steps = 30  # Linear warmup steps from 0 to the peak.
    c.min_lr_ratio = 0.001  # The schedule decays linearly to learning_rate * min_lr_ratio.
    c.weight_decay = 0.01  # Decoupled weight decay (not on LayerNorm, biases, r_*_bias).
    c.adam_b1 = 0.9  # Adam beta1.
    c.adam_b2 = 0.999  # Adam beta2.
    c.adam_eps = 1e-6  # Adam epsilon.
    c.clip_norm = 1.0  # Global gradient-norm clip; 0 disables it.
    c.seed = 0  # Seed of params, dropout, PLM sampling and the data streams.
    c.nonfinite_policy = "skip"  # On a non-finite loss/grad: "skip" the update, or "halt".

    # --- Loop, logging and checkpoints ---
    c.log_every = 10  # Steps between metric lines (console, TensorBoard, metrics.jsonl).
    c.eval_every = 100  # Steps between evaluations on the validation split; 0 disables.
    c.eval_steps = 4  # Validation batches per evaluation.
    c.checkpoint_every = 100  # Steps between checkpoints.
    c.keep_checkpoints = 3  # Newest complete checkpoints kept (+1 until the next save).
    # MFU's denominator, dense TFLOP/s of one device; 0 takes the device's datasheet peak
    # from xlnet_jax/hardware/chips.py (a set value overrides it).
    c.peak_tflops_per_device = 0.0

    # --- Device mesh and sharding ---
    c.mesh_data = -1  # Data-parallel axis; -1 fills the remaining devices.
    c.mesh_fsdp = 1  # Fully-sharded data-parallel axis (params sharded over it).
    c.mesh_tensor = 1  # Tensor-parallel axis (heads, mlp, vocab).
    c.num_slices = 1  # TPU slices joined over DCN; the data axis spans them.
    c.logical_axis_rules = DEFAULT_AXIS_RULES  # Logical axis -> mesh axes.
    return c


def cpu_demo_setting(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A 2 x 128 model on 64-token rows predicting a third of each row (mask_alpha 2; the
    paper predicts a sixth), no dropout: tiny and small add their corpus and schedule."""
    c.d_model = 128
    c.n_layer = 2
    c.n_head = 2
    c.d_head = 64
    c.d_inner = 512
    c.scan_unroll = 2
    c.seq_len = 64
    c.reuse_len = 32
    c.mem_len = 32
    c.perm_size = 32
    c.num_predict = 21
    c.mask_alpha = 2
    c.dropout = 0.0
    c.dropatt = 0.0
    c.learning_rate = 1e-3
    return c


def published_setting(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The paper's sequence layout, objective and optimisation (XLNET_REFERENCE.md 3-4), in
    bfloat16 with remat for TPU; base and large add their widths."""
    c.vocab_size = 32000
    c.ff_activation = "gelu"
    c.untie_r = True
    c.dropout = 0.1
    c.dropatt = 0.1
    c.seq_len = 512
    c.reuse_len = 256
    c.mem_len = 384
    c.perm_size = 256
    c.num_predict = 85
    c.mask_alpha = 6
    c.mask_beta = 1
    c.bi_data = True
    c.batch_size = 8192
    c.num_train_steps = 500_000
    c.learning_rate = 4e-4
    c.warmup_steps = 40_000
    c.min_lr_ratio = 0.001
    c.weight_decay = 0.01
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.dtype = "bfloat16"
    c.remat = True
    c.log_every = 100
    c.eval_every = 10_000
    c.checkpoint_every = 2_000
    return c


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The model's hashable view of the config (a Flax module attribute)."""

    vocab_size: int
    d_model: int
    n_layer: int
    n_head: int
    d_head: int
    d_inner: int
    ff_activation: str = "gelu"
    untie_r: bool = True
    dropout: float = 0.1
    dropatt: float = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    clamp_len: int = -1
    bi_data: bool = False
    reuse_len: int = 0
    mem_len: int = 0
    dtype: str = "float32"
    remat: bool = False
    scan_unroll: int = 1
    attention_impl: str = "auto"

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> "ModelConfig":
        """Picks the model fields out of the full config."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: config[name] for name in names})
