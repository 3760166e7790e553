"""grad_accum_steps in fine-tuning: one step over micro-batches is one step over the batch
(loss, gradient norm and new params), under both clip scopes; bad splits are one line; and
`compile` sizes the micro-batch.

Dropout is off so that the two can be compared: accumulation changes only the summation
order then, and the tolerances are float32 rounding of sums over a few hundred terms.
"""

import jax
import numpy as np
import pytest

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.errors import ConfigError
from xlnet_jax.finetune import compile as finetune_compile
from xlnet_jax.finetune.compile import example_batch
from xlnet_jax.finetune.config import finetune_config, validate
from xlnet_jax.finetune.program import build
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.training.sharding import make_mesh

BATCH = 8
TOKENS = 16


def _config(**overrides):
    c = finetune_config()
    c.vocab_size, c.d_model, c.n_layer, c.n_head, c.d_head, c.d_inner = 64, 32, 2, 2, 16, 64
    c.seq_len, c.batch_size, c.dropout, c.dropatt = TOKENS, BATCH, 0.0, 0.0
    c.learning_rate, c.warmup_steps, c.num_train_steps = 1e-3, 0, 10
    # clip_norm well under the gradient's norm, so the clip acts; adam_eps above the
    # gradient's entries, so Adam's first update follows the gradient's values, not its signs.
    c.clip_norm, c.adam_eps, c.lr_layer_decay_rate = 0.05, 1e-3, 0.5
    c.update(overrides)
    return c


def _batch(config) -> dict[str, np.ndarray]:
    """Random ids and labels; one row at weight 0 and one at 2, so weighted sums matter."""
    rng = np.random.default_rng(0)
    batch = example_batch(get_task("classification"), config)
    batch["input_ids"] = rng.integers(10, config.vocab_size, batch["input_ids"].shape)
    batch["input_ids"] = batch["input_ids"].astype(np.int32)
    batch["seg_ids"][..., TOKENS // 2 :] = 1
    batch["label"] = rng.integers(0, 2, BATCH).astype(np.int32)
    batch["weight"][1], batch["weight"][6] = 0.0, 2.0
    return batch


@pytest.fixture(scope="module")
def initial_params():
    """Random params of the tiny classifier's shapes (on the host), shared by every case:
    drawn here rather than by the program's init, which would cost a compile."""
    config = _config()
    program = build(config, get_task("classification"), ["a", "b"], make_mesh(config),
                    _batch(config))  # fmt: skip
    rng = np.random.default_rng(1)
    return jax.tree.map(
        lambda a: rng.normal(0, 0.2, a.shape).astype(np.float32), program.abstract_state.params
    )


def _one_step_each(configs: list, num_devices: int, params) -> list:
    """[(params after, metrics) per config]: one train step of each config from `params`
    and a fresh optimiser state, on the first `num_devices` devices."""
    task, batch = get_task("classification"), _batch(configs[0])
    mesh = make_mesh(configs[0], jax.devices()[:num_devices])
    results = []
    for config in configs:
        program = build(config, task, ["a", "b"], mesh, batch)
        with program.activate():
            state = TrainState(
                step=np.int32(0),
                params=params,
                opt_state=program.tx.init(params),
                mems=np.zeros((1,), np.float32),
                rng=jax.random.key_data(jax.random.PRNGKey(0)),
                skipped_steps=np.int32(0),
            )
            shardings = jax.tree.map(lambda a: a.sharding, program.abstract_state)
            state = jax.device_put(state, shardings)
            global_batch = program.put_batch(batch)
            step = program.train_step.lower(state, global_batch).compile()
            state, metrics = step(state, global_batch)
            results.append((jax.device_get(state.params), jax.device_get(metrics)))
    return results


@pytest.mark.parametrize(
    "clip_scope,layer_mode,num_devices,accum",
    # global: 4 micro-batches of 2 rows over 2 devices; replica: 4 replicas, 2 micro-batches
    # of one row per replica (each replica's gradient of both is clipped, not each one's).
    [("global", "gradient", 2, 4), ("replica", "update", 4, 2)],
)
def test_accumulated_step_equals_the_full_batch_step(
    initial_params, clip_scope, layer_mode, num_devices, accum
):
    common = dict(clip_scope=clip_scope, lr_layer_decay_mode=layer_mode)
    configs = [_config(**common), _config(grad_accum_steps=accum, **common)]
    [(full, full_metrics), (micro, micro_metrics)] = _one_step_each(
        configs, num_devices, initial_params
    )

    assert full_metrics["grad_norm"] > 10 * _config().clip_norm  # the clip acts
    for name in ("loss", "grad_norm"):
        np.testing.assert_allclose(micro_metrics[name], full_metrics[name], rtol=1e-5)
    updates = [jax.tree.map(np.subtract, after, initial_params) for after in (full, micro)]
    largest = max(np.abs(u).max() for u in jax.tree.leaves(updates[0]))
    assert largest > 1e-5  # the step moved the params
    for got, want in zip(*map(jax.tree.leaves, updates), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * largest)


def test_a_batch_that_does_not_split_into_micro_batches_is_one_line():
    with pytest.raises(ConfigError) as error:
        validate(_config(grad_accum_steps=3))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("config.batch_size: must be divisible by grad_accum_steps=3")
    assert message.endswith("would work.")  # the nearest batch sizes that divide


def test_a_micro_batch_that_does_not_split_over_the_devices_is_one_line():
    # 8 rows in 4 micro-batches: 2 rows per micro-batch over a slice of 4 data shards.
    config = _config(grad_accum_steps=4)
    with pytest.raises(ConfigError) as error:
        finetune_compile.compile_step(config, "v5e:2x2", "classification")
    message = str(error.value)
    assert "\n" not in message
    assert "micro-batch batch_size/grad_accum_steps=2 must divide over the 4 data" in message


def test_compile_reports_the_micro_batch(capsys):
    """`compile` sizes one micro-batch: 16 rows in 4 micro-batches over 4 chips is 1 row per
    chip at a time."""
    config = _config(batch_size=16, grad_accum_steps=4)
    assert finetune_compile.compile_for(config, "classification", topology="v5e:2x2", gpu=None) == 0
    out = capsys.readouterr().out
    assert f"batch per device 1 rows x {TOKENS} = {TOKENS} tokens (one micro-batch)" in out
