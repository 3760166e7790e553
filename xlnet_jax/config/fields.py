"""Every config field, declared once: name, kind, default, part, one-line doc, own range.

Adding a field is one `Field(...)` here plus the code that uses it: `default_config()`,
the type and range checks, the views, the lists of architecture and schedule fields, the
fill-in of an older config.json and the manual's config reference all follow from this
table (docs/architecture.md, "Adding a config field"). A part is a key of PARTS; a new
part is one entry there.
"""

from xlnet_jax.config.declare import (
    ARCHITECTURE,
    BOOL,
    INT,
    INT32_MAX,
    NUMBER,
    REQUIRED,
    RULES,
    SCHEDULE,
    STR,
    Field,
    Range,
    above,
    at_least,
    one_of,
)
from xlnet_jax.config.layout import AUTO_RANGES, DEFAULT_AXIS_RULES

# Part -> its section title in the manual's config reference, in the order shown there.
PARTS = {
    "model": "Model (Transformer-XL with two-stream relative attention)",
    "objective": "Sequence layout and the permutation-LM objective",
    "data": "Data",
    "optimiser": "Optimisation (AdamW, linear warmup then linear decay)",
    "loop": "Loop and logging",
    "checkpoint": "Checkpoints",
    "mesh": "Device mesh and sharding",
    "finetune": "Fine-tuning (`xlnet-jax finetune`; pretraining ignores these)",
}

POSITIVE = above(0)
FRACTION = Range(lambda v: 0 <= v < 1, "must be in [0, 1)")
UNIT = Range(lambda v: 0 <= v <= 1, "must be in [0, 1]")
ARCH = frozenset({ARCHITECTURE})


FIELDS = (
    # --- model ---
    Field(
        "vocab_size",
        INT,
        32000,
        "model",
        "SentencePiece vocabulary size; must equal the tokenizer's.",
        POSITIVE,
        tags=ARCH,
        standalone=REQUIRED,
    ),
    Field(
        "d_model",
        INT,
        128,
        "model",
        "Hidden width.",
        Range(lambda v: v > 0 and v % 2 == 0, "must be > 0 and even (sinusoidal encodings)"),
        tags=ARCH,
        standalone=REQUIRED,
    ),
    Field(
        "n_layer",
        INT,
        2,
        "model",
        "Number of Transformer-XL layers.",
        POSITIVE,
        tags=ARCH,
        standalone=REQUIRED,
    ),
    Field("n_head", INT, 4, "model", "Attention heads.", POSITIVE, tags=ARCH, standalone=REQUIRED),
    Field(
        "d_head",
        INT,
        32,
        "model",
        "Width of one head; released models use d_model // n_head.",
        POSITIVE,
        tags=ARCH,
        standalone=REQUIRED,
    ),
    Field(
        "d_inner",
        INT,
        512,
        "model",
        "Feed-forward inner width.",
        POSITIVE,
        tags=ARCH,
        standalone=REQUIRED,
    ),
    Field(
        "ff_activation",
        STR,
        "gelu",
        "model",
        'Feed-forward activation: "gelu" (exact, erf: HF\'s), "gelu_new" (the original\'s tanh '
        'approximation, HF\'s name for it) or "relu".',
        one_of("gelu", "gelu_new", "relu"),
        tags=ARCH,
    ),
    Field(
        "untie_r",
        BOOL,
        True,
        "model",
        "Per-layer r_w/r_r/r_s biases (True) or one set shared by all layers.",
        tags=ARCH,
    ),
    Field("dropout", NUMBER, 0.1, "model", "Dropout on hidden states.", FRACTION),
    Field("dropatt", NUMBER, 0.1, "model", "Dropout on attention probabilities.", FRACTION),
    Field(
        "initializer_range",
        NUMBER,
        0.02,
        "model",
        "Stddev of the normal init of kernels and embeddings.",
        Range(lambda v: 0 < v <= 1, "must be a finite number in (0, 1], e.g. 0.02"),
    ),
    Field(
        "layer_norm_eps",
        NUMBER,
        1e-12,
        "model",
        "LayerNorm epsilon (post-LN, as the original).",
        Range(lambda v: 0 < v < 1, "must be a finite number in (0, 1), e.g. 1e-12"),
    ),
    Field(
        "clamp_len",
        INT,
        -1,
        "model",
        "Clip relative distances to +-clamp_len; -1 keeps them all.",
        Range(lambda v: v >= -1, "must be -1 (no clipping) or >= 0"),
    ),
    Field(
        "dtype",
        STR,
        "float32",
        "model",
        'Compute dtype: "float32" or "bfloat16"; params stay float32.',
        one_of("float32", "bfloat16"),
    ),
    Field(
        "remat",
        BOOL,
        False,
        "model",
        "Rematerialise each layer in the backward pass to save memory.",
    ),
    Field(
        "scan_unroll",
        INT,
        1,
        "model",
        "Layers per scan iteration; >= n_layer unrolls all (faster, longer compile).",
        at_least(1),
    ),
    Field(
        "attention_impl",
        STR,
        "auto",
        "model",
        'Attention: "xla" (reference), "pallas" (fused kernel: Mosaic on TPU, Triton on NVIDIA '
        'GPUs), "auto" (pallas when the step is traced for a TPU or a GPU, else xla). Not in '
        "checkpoints.",
        one_of("xla", "pallas", "auto"),
    ),
    Field(
        "mem_len",
        INT,
        96,
        "model",
        "Memory length per layer carried across steps; 0 disables memory.",
        at_least(0),
        standalone=0,
    ),
    # --- objective ---
    Field(
        "seq_len",
        INT,
        128,
        "objective",
        "Tokens per row: reuse block + A <sep> B <sep> <cls>.",
        standalone=REQUIRED,
    ),
    Field(
        "reuse_len",
        INT,
        64,
        "objective",
        "Leading tokens of a row that become the next step's memory.",
        at_least(0),
        views={"model": 0},
        standalone=REQUIRED,
    ),
    Field(
        "num_predict",
        INT,
        21,
        "objective",
        "Targets per row (fixed count; ~seq_len / 6).",
        at_least(1),
        standalone=REQUIRED,
    ),
    Field(
        "perm_size",
        INT,
        64,
        "objective",
        "Factorization orders are shared by blocks of this many tokens.",
        at_least(1),
        standalone=REQUIRED,
    ),
    Field(
        "mask_alpha",
        INT,
        6,
        "objective",
        "Context tokens per span = span_len * mask_alpha / mask_beta.",
        POSITIVE,
        standalone=REQUIRED,
    ),
    Field("mask_beta", INT, 1, "objective", "See mask_alpha.", POSITIVE, standalone=REQUIRED),
    Field(
        "max_span",
        INT,
        5,
        "objective",
        "Longest span in words; p(n) is proportional to 1/n.",
        at_least(1),
        standalone=REQUIRED,
    ),
    # --- data ---
    Field(
        "next_sentence_prob",
        NUMBER,
        0.5,
        "data",
        "Probability that B is the true continuation of A.",
        UNIT,
    ),
    Field(
        "bi_data",
        BOOL,
        False,
        "data",
        "Half of each data shard's rows are the same streams reversed.",
        views={"model": False},
    ),
    Field(
        "corpus_dir",
        STR,
        "",
        "data",
        "Output of `xlnet-jax prepare`; empty means WORKDIR/corpus (built-in). Several, "
        "comma-separated (DIR1,DIR2), pretrain on their mixture (one tokenizer).",
    ),
    Field(
        "corpus_weights",
        STR,
        "",
        "data",
        "A mixture's relative weights, one per corpus_dir entry (3,1): each corpus's share of "
        "every step's streams; empty: by corpus_alpha, else by the corpora's token counts.",
    ),
    Field(
        "corpus_alpha",
        NUMBER,
        0.0,
        "data",
        "A mixture's temperature in [0, 1]: shares proportional to each train split's tokens "
        "** alpha (0.3 in XLM-R and mT5; 1 is by token counts); 0: not used.",
        UNIT,
    ),
    Field(
        "data_ranges",
        INT,
        AUTO_RANGES,
        "data",
        "Contiguous ranges of each split's shards, each a ring of its own streams; a host stages "
        "and caches only its rows' ranges: a multiple or divisor of the process count that divides"
        " the batch's streams (1: read whole), or 0, the process count when the run starts, "
        "recorded in the run's config.json so that a resume on another process count reads the "
        "same batches.",
        saved_before=1,
    ),
    # --- optimiser ---
    Field(
        "batch_size",
        INT,
        16,
        "optimiser",
        "Global batch (rows per step, all hosts together).",
        POSITIVE,
    ),
    Field(
        "grad_accum_steps",
        INT,
        1,
        "optimiser",
        "Micro-batches per step; batch_size must divide by it.",
        at_least(1),
    ),
    Field(
        "num_train_steps",
        INT,
        300,
        "optimiser",
        "Total optimiser steps.",
        POSITIVE,
        tags=frozenset({SCHEDULE}),
    ),
    Field(
        "learning_rate",
        NUMBER,
        0.001,
        "optimiser",
        "Peak learning rate.",
        Range(lambda v: v > 0, "must be a finite number > 0"),
        tags=frozenset({SCHEDULE}),
    ),
    Field(
        "warmup_steps",
        INT,
        30,
        "optimiser",
        "Linear warmup steps from 0 to the peak.",
        at_least(0),
        tags=frozenset({SCHEDULE}),
    ),
    Field(
        "min_lr_ratio",
        NUMBER,
        0.001,
        "optimiser",
        "The schedule decays linearly to learning_rate * min_lr_ratio.",
        UNIT,
        tags=frozenset({SCHEDULE}),
    ),
    Field(
        "weight_decay",
        NUMBER,
        0.01,
        "optimiser",
        "Decoupled weight decay (not on LayerNorm or biases; on r_*_bias, as the original).",
        at_least(0),
    ),
    Field("adam_b1", NUMBER, 0.9, "optimiser", "Adam beta1.", FRACTION),
    Field("adam_b2", NUMBER, 0.999, "optimiser", "Adam beta2.", FRACTION),
    Field("adam_eps", NUMBER, 1e-06, "optimiser", "Adam epsilon.", POSITIVE),
    Field(
        "pretrain_adam_variant",
        STR,
        "adamw",
        "optimiser",
        'Pretraining\'s Adam: "adamw" (optax.adamw, bias-corrected, HF\'s) or "original" (the '
        "original's: weight_decay > 0 is AdamWeightDecayOptimizer, no bias correction; 0 is "
        "TF's AdamOptimizer). Fine-tuning takes adam_variant.",
        one_of("adamw", "original"),
    ),
    Field(
        "clip_norm",
        NUMBER,
        1.0,
        "optimiser",
        "Global gradient-norm clip; 0 disables it.",
        at_least(0, " (0 disables clipping)"),
    ),
    Field(
        "pretrain_clip_replicas",
        INT,
        0,
        "optimiser",
        "Pretraining's clip: 0, one global clip of the batch's gradient (the default: "
        "train_gpu.py's and HF's form, the same update on any device count); n > 0, the "
        "original TPU train.py's per-core clip over n cores, whatever the mesh (each core's "
        "share of the rows: its gradient / n clipped to clip_norm, then summed). Must "
        "divide each micro-batch's rows. Fine-tuning takes clip_scope and clip_replicas.",
        at_least(0, " (0: one global clip)"),
    ),
    Field(
        "seed",
        INT,
        0,
        "optimiser",
        "Seed of params, dropout, PLM sampling and the data streams.",
        Range(
            lambda v: 0 <= v < INT32_MAX,
            f"must be an integer in [0, {INT32_MAX - 1}]; seed + 1 seeds evaluation",
        ),
    ),
    Field(
        "nonfinite_policy",
        STR,
        "skip",
        "optimiser",
        'On a non-finite loss/grad: "skip" the update, or "halt".',
        one_of("skip", "halt"),
    ),
    # --- loop ---
    Field(
        "log_every",
        INT,
        10,
        "loop",
        "Steps between metric lines (console, TensorBoard, metrics.jsonl).",
        at_least(1),
    ),
    Field(
        "eval_every",
        INT,
        100,
        "loop",
        "Steps between evaluations on the validation split; 0 disables.",
        at_least(0, " (0 disables eval)"),
    ),
    Field("eval_steps", INT, 4, "loop", "Validation batches per evaluation.", at_least(1)),
    Field(
        "peak_tflops_per_device",
        NUMBER,
        0.0,
        "loop",
        "MFU's denominator, dense TFLOP/s of one device; 0 takes the device's datasheet peak from "
        "xlnet_jax/hardware/chips.py (a set value overrides it).",
        at_least(0, " (0 takes the device's datasheet peak)"),
    ),
    # --- checkpoint ---
    Field("checkpoint_every", INT, 100, "checkpoint", "Steps between checkpoints.", at_least(1)),
    Field(
        "keep_checkpoints",
        INT,
        3,
        "checkpoint",
        "Newest complete checkpoints kept (+1 until the next save).",
        at_least(1),
    ),
    Field(
        "save_wait_s",
        NUMBER,
        600.0,
        "checkpoint",
        "Seconds the loop (or the exit) waits on an asynchronous save before it gives that save "
        "up.",
        Range(lambda v: 0 < v <= 86400, "must be in (0, 86400] seconds"),
    ),
    Field(
        "failed_saves",
        INT,
        3,
        "checkpoint",
        "Saves in a row that may fail before the run stops, naming the newest complete step.",
        at_least(1),
    ),
    Field(
        "metrics_wait_s",
        NUMBER,
        60.0,
        "checkpoint",
        "Seconds the loop waits before a save for the metrics so far to be uploaded (gs:// "
        "workdirs); well inside orbax's 300 s barrier, where the other hosts wait.",
        Range(lambda v: 0 <= v <= 300, "must be in [0, 300] seconds (orbax's barrier)"),
    ),
    # --- mesh ---
    Field("mesh_data", INT, -1, "mesh", "Data-parallel axis; -1 fills the remaining devices."),
    Field(
        "mesh_fsdp", INT, 1, "mesh", "Fully-sharded data-parallel axis (params sharded over it)."
    ),
    Field("mesh_tensor", INT, 1, "mesh", "Tensor-parallel axis (heads, mlp, vocab)."),
    Field(
        "num_slices",
        INT,
        1,
        "mesh",
        "TPU slices joined over DCN; the data axis spans them.",
        at_least(1),
    ),
    Field("logical_axis_rules", RULES, DEFAULT_AXIS_RULES, "mesh", "Logical axis -> mesh axes."),
    # --- finetune ---
    Field(
        "num_segments",
        INT,
        1,
        "finetune",
        "Segments of seq_len one text is read in through the recurrence memory (1: one row, "
        "as the original; more reads texts up to num_segments * seq_len tokens; RACE: every "
        "segment is a row of its own, a window of the article with the question and option).",
        at_least(1),
    ),
    Field(
        "mem_gradient",
        BOOL,
        True,
        "finetune",
        "num_segments > 1: the gradient flows through the memory into a text's earlier "
        "segments, which so train for the task (a backward pass over every segment); false: "
        "they are read with the weights as they are and the memory is a constant.",
        saved_before=False,
    ),
    Field(
        "max_qa_length",
        INT,
        128,
        "finetune",
        "RACE: tokens of question + option kept, from their end (the original's flag).",
        at_least(1),
    ),
    Field(
        "race_rows",
        STR,
        "fresh",
        "finetune",
        'RACE: "fresh" (each option\'s row built anew) or "aliased" (the original\'s run_race '
        "rows, where option k's segment A also holds options 0..k-1, zihangdai/xlnet#204: to "
        "compare with the published figures; one segment).",
        one_of("fresh", "aliased"),
    ),
    Field(
        "lr_layer_decay_rate",
        NUMBER,
        1.0,
        "finetune",
        "Layer l of n learns at learning_rate * rate ** (n - 1 - l); 1 disables it.",
        Range(lambda v: 0 < v <= 1, "must be in (0, 1]"),
    ),
    Field(
        "lr_layer_decay_mode",
        STR,
        "gradient",
        "finetune",
        'What the layer factors scale: "gradient" (after clipping, before Adam: the '
        'original\'s get_train_op) or "update" (the per-layer learning rate of common '
        "practice, a much stronger decay).",
        one_of("gradient", "update"),
    ),
    Field(
        "adam_variant",
        STR,
        "original",
        "finetune",
        "Fine-tuning's Adam: \"original\" (weight_decay 0: TF's AdamOptimizer; > 0: the "
        'original\'s AdamWeightDecayOptimizer, no bias correction) or "adamw" (optax.adamw, '
        "as pretraining).",
        one_of("original", "adamw"),
    ),
    Field(
        "clip_scope",
        STR,
        "replica",
        "finetune",
        'Where clip_norm applies: "replica" (each data-parallel device\'s share of the batch, '
        'before the sum, as the original on TPU) or "global" (the whole batch\'s gradient).',
        one_of("replica", "global"),
    ),
    Field(
        "clip_replicas",
        INT,
        0,
        "finetune",
        "clip_scope \"replica\": how many replicas' shares are clipped apart (the original's "
        "core count: SQuAD 8, RACE 32), whatever the mesh; 0: the mesh's data-parallel "
        "devices. Must divide each micro-batch's rows.",
        at_least(0, " (0: the mesh's data-parallel devices)"),
    ),
    Field(
        "answer_class_start",
        STR,
        "expected",
        "finetune",
        'SQuAD: the start state the answer class trains on: "expected" (softmax(start) '
        "weighted, the original's) or \"gold\" (the gold start, HF's).",
        one_of("expected", "gold"),
    ),
    Field(
        "squad_version",
        STR,
        "",
        "finetune",
        'SQuAD: "1.1" or "2.0"; "" tells it from the data files.',
        one_of("", "1.1", "2.0"),
    ),
    Field(
        "doc_stride",
        INT,
        128,
        "finetune",
        "SQuAD: pieces between the starts of a long paragraph's windows.",
        at_least(1),
    ),
    Field(
        "max_query_length",
        INT,
        64,
        "finetune",
        "SQuAD: pieces of a question kept, from its start.",
        at_least(1),
    ),
    Field(
        "start_n_top",
        INT,
        5,
        "finetune",
        "SQuAD: best starts kept per window in evaluation (also written to export-hf).",
        at_least(1),
    ),
    Field(
        "end_n_top",
        INT,
        5,
        "finetune",
        "SQuAD: best ends kept per start in evaluation (also written to export-hf).",
        at_least(1),
    ),
    Field(
        "n_best_size",
        INT,
        5,
        "finetune",
        "SQuAD: answers kept per question in predictions/SPLIT_nbest.json.",
        at_least(1),
    ),
    Field(
        "squad_postprocess",
        STR,
        "original",
        "finetune",
        'SQuAD answers and threshold: "original" (run_squad to the letter: the window\'s '
        "last paragraph piece never ends an answer, the first n-best entry even if empty, the "
        'threshold search may split a tie) or "consistent" (that piece counts, the best '
        "non-empty text, a threshold that gives its score back).",
        one_of("original", "consistent"),
        saved_before="consistent",
    ),
    Field(
        "max_answer_length",
        INT,
        64,
        "finetune",
        "SQuAD: pieces of the longest answer predicted.",
        at_least(1),
    ),
)

BY_NAME = {field.name: field for field in FIELDS}


def in_part(part: str) -> tuple[Field, ...]:
    """The fields of one part, in table order."""
    return tuple(f for f in FIELDS if f.part == part)


def tagged(tag: str) -> tuple[str, ...]:
    """The names of the fields that carry `tag`, in table order."""
    return tuple(f.name for f in FIELDS if tag in f.tags)
