"""The jitted train and eval steps: PLM sampling, two-stream forward, loss, AdamW update.

Both are pure functions of (state, batch); the PLM key is fold_in(rng, step), so the host
only ships the O(batch x seq) integer batch and all masks are built on device.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax.sharding import NamedSharding

from xlnet_jax.checkpoint.train_state import TrainState
from xlnet_jax.model.xlnet import XLNetLM, uses_kernel
from xlnet_jax.objective import plm
from xlnet_jax.training import accumulate
from xlnet_jax.training import replicas as replicas_lib

# Codes of the `nonfinite` metric: which quantity went non-finite first.
FINITE, NONFINITE_LOSS, NONFINITE_GRAD, NONFINITE_UPDATE = 0, 1, 2, 3
NONFINITE_NAMES = {NONFINITE_LOSS: "loss", NONFINITE_GRAD: "gradient", NONFINITE_UPDATE: "update"}


def plm_loss_terms(logits: jax.Array, target_ids: jax.Array, weights: jax.Array):
    """Summed cross-entropy, target count and correct predictions over weighted targets."""
    logits = logits.astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(log_probs, target_ids[..., None], axis=-1)[..., 0]
    correct = (jnp.argmax(logits, axis=-1) == target_ids).astype(jnp.float32)
    return jnp.sum(nll * weights), jnp.sum(weights), jnp.sum(correct * weights)


def step_keys(rng_data: jax.Array, step) -> tuple[jax.Array, jax.Array]:
    """(PLM key, dropout key) of optimizer step `step`, from the train state's rng data."""
    return tuple(jax.random.split(jax.random.fold_in(jax.random.wrap_key_data(rng_data), step)))


def sample_targets(batch: dict, key: jax.Array, config: ml_collections.ConfigDict) -> plm.PLMSample:
    """Targets and factorization orders of every row of `batch` under `key`."""
    return plm.sample_plm(
        key,
        batch["input_ids"],
        batch["is_word_start"],
        batch["is_functional"],
        batch["is_backward"],
        plm.PLMConfig.from_config(config),
    )


def forward(model, params, batch, sample, mems, dropout_key, reuse_len, *, deterministic):
    """Runs the two-stream model on `batch` with its PLM sample; returns (terms, new_mems):
    the train and eval steps' forward, and the kernel check's (kernel_check.loss_and_grads)."""
    logits, new_mems = forward_logits(
        model, params, batch, sample, mems, dropout_key, reuse_len, deterministic=deterministic
    )
    return plm_loss_terms(logits, sample.target_ids, sample.target_weights), new_mems


def forward_logits(model, params, batch, sample, mems, dropout_key, reuse_len, *, deterministic):
    """The model's target logits on `batch` with its PLM sample, and the new memory."""
    mask_fn = plm.perm_order if uses_kernel(model.config) else plm.perm_mask
    mask = mask_fn(sample, batch["is_functional"], reuse_len)
    logits, new_mems = model.apply(
        {"params": params},
        batch["input_ids"],
        batch["seg_ids"],
        mask,
        sample.target_pos,
        mems,
        batch["is_backward"],
        deterministic=deterministic,
        rngs=None if deterministic else {"dropout": dropout_key},
    )
    return logits, new_mems


def train_step(
    state: TrainState,
    batch: dict,
    *,
    model: XLNetLM,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    config: ml_collections.ConfigDict,
    share_sharding: NamedSharding | None = None,
) -> tuple[TrainState, dict]:
    """One optimiser step over the global batch, accumulating grad_accum_steps micro-batches.

    The PLM sample is drawn once for the whole batch and split with it, so accumulation
    changes only the summation order (and the dropout draws), not what is predicted.

    With config.pretrain_clip_replicas n > 0 the gradient is the original TPU train.py's
    over n cores (replicas.replica_gradients): core r's rows are the r-th of n consecutive
    shares, with their own rows' memory and the same PLM sample as above; its loss is the
    mean over its own targets; dropout draws fold_in(micro-batch key, r). With bi_data and
    n the data shards' count a share is a data shard's rows, forward then backward, as the
    original's core. `share_sharding` (rows over the mesh's data axes) lays the shares on
    the data devices. 0: tx clips the batch's gradient once.

    A non-finite loss, gradient norm or update norm skips the update (see guard_update) and
    is reported in the `nonfinite` metric, so the host checks it at log time instead of
    syncing every step.
    """
    plm_key, dropout_key = step_keys(state.rng, state.step)
    sample = sample_targets(batch, plm_key, config)
    n_micro = config.grad_accum_steps
    rows = (batch, sample, jnp.swapaxes(state.mems, 0, 1))  # memory rows first: [b, layers, ...]

    def summed_terms(params, micro_rows, key):
        """((nll, count, correct) sums of the rows, their new memory rows first)."""
        micro_batch, micro_sample, mems = micro_rows
        terms, new_mems = forward(
            model, params, micro_batch, micro_sample, jnp.swapaxes(mems, 0, 1), key,
            config.reuse_len, deterministic=False,
        )  # fmt: skip
        return terms, jnp.swapaxes(new_mems, 0, 1)

    def micro_key(index):
        return jax.random.fold_in(dropout_key, index)

    replicas = config.get("pretrain_clip_replicas", 0)
    if replicas > 0:

        def share_loss(params, share_rows, key, targets):
            terms, new_mems = summed_terms(params, share_rows, key)
            return terms[0] / jnp.maximum(targets, 1.0), (terms, new_mems)

        _, raw, grads, (terms, new_mems) = replicas_lib.replica_gradients(
            share_loss, state.params, rows, jnp.sum(sample.target_weights, axis=-1), micro_key,
            replicas, config.clip_norm, share_sharding, n_micro,
        )  # fmt: skip
        nll, count, correct = (jnp.sum(t) for t in terms)  # over micro-batches and shares
        new_mems = new_mems.reshape(n_micro, -1, *new_mems.shape[3:])  # [n, b / n, ...]
        grad_norm = optax.tree.norm(raw)
    else:

        def micro_step(index, micro_rows):
            def summed_nll(params):
                terms, new_mems = summed_terms(params, micro_rows, micro_key(index))
                return terms[0], (terms, new_mems)

            grads, (terms, new_mems) = jax.grad(summed_nll, has_aux=True)(state.params)
            return (grads, terms), new_mems

        zero_grads = jax.tree.map(jnp.zeros_like, state.params)
        zero_terms = (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()))
        (grads, (nll, count, correct)), new_mems = accumulate.sum_over(
            micro_step, (zero_grads, zero_terms), accumulate.split(rows, n_micro)
        )
        grads = jax.tree.map(lambda g: g / jnp.maximum(count, 1.0), grads)
        grad_norm = optax.tree.norm(grads)
    new_mems = jnp.swapaxes(accumulate.merge(new_mems), 0, 1)
    count = jnp.maximum(count, 1.0)
    loss = nll / count

    updates, new_opt_state = tx.update(grads, state.opt_state, state.params)
    nonfinite = nonfinite_code(loss, grad_norm, optax.tree.norm(updates))
    new_state = guard_update(
        state,
        nonfinite,
        params=optax.apply_updates(state.params, updates),
        opt_state=new_opt_state,
        mems=new_mems,
    )
    metrics = {
        "loss": loss,
        "accuracy": correct / count,
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step),
        "num_targets": count,
        "nonfinite": nonfinite,
        "skipped_steps": new_state.skipped_steps,
    }
    return new_state, metrics


def nonfinite_code(loss: jax.Array, grad_norm: jax.Array, update_norm: jax.Array) -> jax.Array:
    """Which quantity went non-finite first (FINITE if none did), as an int32 scalar.

    The update is checked too: a learning rate beyond float32 range turns finite gradients
    into infinite parameters, which would otherwise be saved before the loss shows it.
    """
    return jnp.select(
        [~jnp.isfinite(loss), ~jnp.isfinite(grad_norm), ~jnp.isfinite(update_norm)],
        [NONFINITE_LOSS, NONFINITE_GRAD, NONFINITE_UPDATE],
        FINITE,
    ).astype(jnp.int32)


def guard_update(
    state: TrainState, nonfinite: jax.Array, *, params, opt_state, mems: jax.Array
) -> TrainState:
    """The next state: the new values if `nonfinite` is FINITE, else the step is skipped.

    A skipped step keeps the params and optimiser state, resets the memory to zeros (it may
    hold the non-finite activations) and counts itself in skipped_steps; the step counter
    advances either way, so the data stream moves past the batch.
    """
    finite = nonfinite == FINITE
    keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
    return state.replace(
        step=state.step + 1,
        params=keep(params, state.params),
        opt_state=keep(opt_state, state.opt_state),
        mems=jnp.where(finite, mems, jnp.zeros_like(mems)),
        skipped_steps=state.skipped_steps + (~finite).astype(jnp.int32),
    )


def eval_step(params, mems, batch, key, *, model: XLNetLM, config: ml_collections.ConfigDict):
    """Deterministic forward on a validation batch: (new_mems, summed nll, count, correct)."""
    sample = sample_targets(batch, key, config)
    terms, new_mems = forward(
        model, params, batch, sample, mems, None, config.reuse_len, deterministic=True
    )
    return new_mems, terms


def eval_step_by_corpus(
    params,
    mems,
    batch,
    key,
    row_corpus,
    *,
    model: XLNetLM,
    config: ml_collections.ConfigDict,
    corpora: int,
):
    """eval_step for a mixture: (new_mems, float32 [corpora, 3]), the summed nll, target
    count and correct predictions of each corpus's rows (row_corpus: int [B], the corpus of
    every global row); their sum over corpora is eval_step's terms."""
    sample = sample_targets(batch, key, config)
    logits, new_mems = forward_logits(
        model, params, batch, sample, mems, None, config.reuse_len, deterministic=True
    )
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    nll = -jnp.take_along_axis(log_probs, sample.target_ids[..., None], axis=-1)[..., 0]
    correct = (jnp.argmax(logits, axis=-1) == sample.target_ids).astype(jnp.float32)
    weights = sample.target_weights
    onehot = (row_corpus[:, None] == jnp.arange(corpora)[None, :]).astype(jnp.float32)
    per_row = jnp.stack([(nll * weights).sum(-1), weights.sum(-1), (correct * weights).sum(-1)])
    return new_mems, (per_row @ onehot).T
