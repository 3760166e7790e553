"""The declaration table (xlnet_jax/config/fields.py) is sound, and what is read off it."""

import json

from xlnet_jax import config as config_lib
from xlnet_jax.config.declare import value_problem
from xlnet_jax.objective.plm import PLMConfig
from xlnet_jax.training import run_config


def test_every_declaration_is_sound():
    """Its part is known, its default passes its own kind and range, its range speaks."""
    for field in config_lib.FIELDS:
        assert field.part in config_lib.PARTS, field.name
        assert field.doc and "\n" not in field.doc, field.name
        assert value_problem(field, field.default) is None, field.name
        assert field.range is None or field.range.words.startswith("must"), field.name
    assert len(config_lib.BY_NAME) == len(config_lib.FIELDS)  # no name declared twice


def test_the_views_hold_their_parts_in_table_order():
    model = [f.name for f in config_lib.FIELDS if f.in_view("model")]
    assert [f for f in config_lib.ModelConfig.__dataclass_fields__] == model
    assert {"bi_data", "reuse_len", "mem_len"} <= set(model)
    assert list(PLMConfig.__dataclass_fields__) == [
        "seq_len", "reuse_len", "num_predict", "perm_size", "mask_alpha", "mask_beta", "max_span"
    ]  # fmt: skip
    assert config_lib.ModelConfig(1, 2, 3, 4, 5, 6).reuse_len == 0  # standalone value


def test_a_config_json_saved_before_a_field_resumes_with_what_it_meant(tmp_path):
    """Fields a config.json lacks take their `saved_before` value (data_ranges: 1, the
    whole split) or their default (the checkpoint bounds)."""
    config = config_lib.default_config()
    run_config.save(str(tmp_path), config)
    path = tmp_path / run_config.CONFIG_FILE
    saved = json.loads(path.read_text())
    for name in ("data_ranges", "save_wait_s", "failed_saves", "metrics_wait_s"):
        del saved[name]
    path.write_text(json.dumps(saved))
    loaded = run_config.load(str(tmp_path))
    assert loaded.data_ranges == 1
    assert (loaded.save_wait_s, loaded.failed_saves, loaded.metrics_wait_s) == (600.0, 3, 60.0)
    assert set(loaded.keys()) == set(config.keys())
