"""A run without memory (mem_len 0) keeps checkpoints: its memory is a zero-size array, which
orbax refuses to save, so the checkpoint holds no memory item, and both readers (a resume's
Checkpointer.restore and read_checkpoint, which eval, export and init_from use) give the
saved state back with no memory (a resume starts a fresh, empty one)."""

import jax
import jax.numpy as jnp
import numpy as np

from tests import train_config
from xlnet_jax.checkpoint.checkpointer import Checkpointer
from xlnet_jax.checkpoint.meta import make_meta
from xlnet_jax.checkpoint.reader import read_checkpoint
from xlnet_jax.checkpoint.train_state import TrainState

CONFIG = train_config.get_config()
CONFIG.mem_len = 0


def _state(step: int) -> TrainState:
    key = jax.random.key(step)
    return TrainState(
        step=jnp.int32(step),
        params={"w": jax.random.normal(key, (8, 4))},
        opt_state={"mu": jnp.full((8, 4), step, jnp.float32)},
        mems=jnp.zeros((CONFIG.n_layer, CONFIG.batch_size, 0, CONFIG.d_model)),
        rng=jax.random.key_data(key),
        skipped_steps=jnp.int32(0),
    )


def test_a_run_without_memory_saves_and_restores_its_state(tmp_path):
    workdir = str(tmp_path)
    saver = Checkpointer(workdir, CONFIG)
    assert saver.save(_state(3), make_meta(CONFIG, "fingerprint", 3))
    saver.close()
    assert saver.newest_complete == 3
    want = np.asarray(_state(3).params["w"])

    reader = Checkpointer(workdir, CONFIG)
    try:
        restored = reader.restore(_state(0), CONFIG, "fingerprint", move_damaged=False)
    finally:
        reader.close()
    assert int(restored.step) == 3 and restored.mems is None
    np.testing.assert_array_equal(np.asarray(restored.params["w"]), want)

    read = read_checkpoint(workdir)
    assert read["step"] == 3 and read["mems"] is None
    np.testing.assert_array_equal(np.asarray(read["state"]["params"]["w"]), want)
