"""The held-out loss per corpus of a mixture (issue 62): `corpus/NAME/loss` beside the
overall loss, from the same forward pass, summing to what the plain eval step scores."""

import jax
import numpy as np

from tests.mixture_corpora import corpora
from tests.train_config import small_config
from xlnet_jax.training import evaluate, sharding
from xlnet_jax.training.program import build_program


def test_per_corpus_losses_sum_to_the_plain_eval_and_name_each_corpus():
    config = small_config(
        vocab_size=500, corpus_dir=",".join(corpora()), corpus_weights="3,1", eval_steps=2
    )
    program = build_program(config, sharding.make_mesh(config))
    with program.activate():
        params = program.init_state().params
        result = evaluate.make_evaluator(program, config.corpus_dir)(params)
        # the plain eval step on the same batches and keys (make_evaluator's), all rows
        batcher, mems, totals = program.batcher(config.corpus_dir, "validation"), None, []
        mems = program.zero_mems()
        for index in range(2):
            key = jax.random.fold_in(jax.random.PRNGKey(config.seed + 1), index)
            mems, terms = program.eval_step(
                params, mems, program.put_batch(batcher.batch(index)), key
            )
            totals.append(np.asarray(terms))
    nll, count, _ = np.sum(totals, axis=0)
    assert result["targets"] == int(count)
    np.testing.assert_allclose(result["loss"], nll / count, rtol=1e-5)
    names = ["corpus", "docs"]
    targets = [result[f"corpus/{n}/targets"] for n in names]
    assert sum(targets) == result["targets"] and min(targets) > 0
    overall = sum(result[f"corpus/{n}/loss"] * result[f"corpus/{n}/targets"] for n in names)
    np.testing.assert_allclose(overall / result["targets"], result["loss"], rtol=1e-9)
    table = evaluate.corpus_table(result)
    assert table[0].split() == ["corpus", "held-out", "loss", "accuracy", "targets"]
    assert [line.split()[0] for line in table[1:]] == names
