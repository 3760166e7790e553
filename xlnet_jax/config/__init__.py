"""The one config object: its defaults, the presets' shared settings, the model's frozen
view of it, and the lists read off its declarations.

  fields.py   every field, declared once (name, kind, default, part, doc, range)
  declare.py  what a field is; the views built from the table
  layout.py   the mesh axes and axis rules, mesh_shape, data_ranges

Presets in `configs/` start from `default_config()` and change what differs. The same
ConfigDict flows through data, objective, model, training and checkpoints. This package
imports only `errors` (the bottom layer).
"""

import dataclasses

import ml_collections

from xlnet_jax.config.declare import ARCHITECTURE, SCHEDULE, Field, value_problem, view
from xlnet_jax.config.fields import BY_NAME, FIELDS, PARTS, tagged
from xlnet_jax.config.layout import (
    AUTO_RANGES,
    DEFAULT_AXIS_RULES,
    MESH_AXES,
    data_ranges,
    mesh_shape,
)

__all__ = [
    "ARCHITECTURE_FIELDS",
    "AUTO_RANGES",
    "BY_NAME",
    "DEFAULT_AXIS_RULES",
    "FIELDS",
    "MESH_AXES",
    "PARTS",
    "SCHEDULE_FIELDS",
    "Field",
    "ModelConfig",
    "cpu_demo_setting",
    "data_ranges",
    "default_config",
    "mesh_shape",
    "from_saved",
    "published_setting",
    "view",
    "view_problem",
]

# Fields that fix the parameter shapes or the function the params compute: never changed
# on resume, and a checkpoint made with other values is refused.
ARCHITECTURE_FIELDS = tagged(ARCHITECTURE)
# Fields whose change moves the learning rate of the steps still to come.
SCHEDULE_FIELDS = tagged(SCHEDULE)


def default_config() -> ml_collections.ConfigDict:
    """Every field with its default; the `tiny` shape unless a preset overrides it."""
    return ml_collections.ConfigDict({field.name: field.default for field in FIELDS})


def view_problem(frozen) -> str | None:
    """The first field of a frozen view (ModelConfig, PLMConfig) outside its declared kind
    or range, as 'NAME: must be ... (got V)', or None."""
    for name, value in dataclasses.asdict(frozen).items():
        if problem := value_problem(BY_NAME[name], value):
            return f"{name}: {problem}"
    return None


def from_saved(values: dict) -> ml_collections.ConfigDict:
    """The config a saved one (config.json, a checkpoint's meta) describes: each field it
    lacks at the value a config saved before the field existed means (Field.saved_before),
    so old workdirs resume; the axis rules' JSON lists back to tuples."""
    values = {**{f.name: f.legacy for f in FIELDS if f.name not in values}, **values}
    values["logical_axis_rules"] = tuple(
        (name, tuple(axes) if isinstance(axes, list) else axes)
        for name, axes in values["logical_axis_rules"]
    )
    return ml_collections.ConfigDict(values)


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
    """The paper's sequence layout, objective and optimisation (docs/published.md), in
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
    c.warmup_steps = c.get_ref("num_train_steps") * 2 // 25  # 40k of 500k
    c.min_lr_ratio = 0.001
    c.weight_decay = 0.01
    c.adam_eps = 1e-6
    c.clip_norm = 1.0
    c.dtype = "bfloat16"
    c.remat = True
    c.log_every = 100
    c.eval_every = (c.get_ref("num_train_steps") + 49) // 50  # 10k of 500k; never 0
    c.checkpoint_every = (c.get_ref("num_train_steps") + 249) // 250  # 2k of 500k
    return c


ModelConfig = view(
    "ModelConfig",
    "model",
    FIELDS,
    "The model's hashable view of the config (a Flax module attribute).",
    __name__,
)
