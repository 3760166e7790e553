"""Sharding is invisible: a (data 2, fsdp 2, tensor 2) mesh trains like one device."""

import jax
import pytest

from tests.helpers import assert_same_training, synthetic_batch
from tests.train_config import small_config
from xlnet_jax.training import sharding
from xlnet_jax.training.program import build_program


def _train(config, devices, num_steps=3):
    program = build_program(config, sharding.make_mesh(config, devices))
    state, losses = program.init_state(), []
    with program.activate():
        for t in range(num_steps):
            batch = program.put_batch(synthetic_batch(config, t))
            state, metrics = program.train_step(state, batch)
            losses.append(float(metrics["loss"]))
    return losses, jax.device_get(state.params), jax.device_get(state.mems), state


# Dropout off so gradient accumulation can be compared exactly; dropout under sharding is
# covered by tests/test_multihost.py (2 processes x 2 devices against 1 device).
BASE = dict(bi_data=True, dropout=0.0, dropatt=0.0)


@pytest.fixture(scope="module")
def one_device():
    return _train(small_config(mesh_data=1, **BASE), jax.devices()[:1])


def test_eight_devices_match_one_device(one_device):
    losses_1, params_1, mems_1, _ = one_device
    config = small_config(mesh_data=2, mesh_fsdp=2, mesh_tensor=2, **BASE)
    losses_8, params_8, mems_8, state_8 = _train(config, jax.devices()[:8])

    assert_same_training(losses_8, losses_1, params_8, params_1, mems_8, mems_1)
    # The state really is spread: a kernel over fsdp x tensor, the memory over the batch.
    kernel = state_8.params["layers"]["attention"]["q"]
    assert len(kernel.sharding.device_set) == 8
    assert kernel.addressable_shards[0].data.shape[1:3] == (32 // 2, 4 // 2)
    assert state_8.mems.addressable_shards[0].data.shape[1] == config.batch_size // 4


def test_grad_accumulation_matches_one_big_batch(one_device):
    losses_1, params_1, mems_1, _ = one_device
    accum = small_config(mesh_data=1, grad_accum_steps=4, **BASE)
    losses_4, params_4, mems_4, _ = _train(accum, jax.devices()[:1])
    assert_same_training(losses_4, losses_1, params_4, params_1, mems_4, mems_1)
