"""`compile --task_name`: the fine-tuning step AOT-compiled for a TPU slice from this CPU."""

from xlnet_jax.finetune import compile as finetune_compile
from xlnet_jax.finetune.config import finetune_config


def tiny_race_config():
    c = finetune_config()
    c.vocab_size, c.d_model, c.n_layer, c.n_head, c.d_head, c.d_inner = 64, 32, 2, 2, 16, 64
    c.seq_len, c.batch_size, c.max_qa_length = 32, 8, 8
    return c


def test_race_compiles_for_a_seed_on_half_a_slice_with_its_four_options_per_row(capsys):
    """--devices_per_seed 2 on a 4-chip v5e: one seed's step on 2 chips (batch 8 -> 4 rows a
    chip), and 2 seeds side by side."""
    code = finetune_compile.compile_for(
        tiny_race_config(), "race", topology="v5e:2x2", gpu=None, devices_per_seed=2
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "fine-tuning race: a row of the batch is 4 sequence(s) x 1 segment(s) of 32" in out
    assert "one seed's step on 2 of the 4 devices; 2 seeds run side by side" in out
    assert "batch per device 4 rows x 32" in out and "\nfits: peak" in out
