"""A mixture of two corpora of different real text through `xlnet-jax train` (issue 62):
weights 3,1 give the rows, the tokens seen and a held-out loss per corpus in the metrics,
and the start lines name each corpus's share."""

from tests import train_harness as harness
from tests.mixture_corpora import corpora
from xlnet_jax.training.metrics import read_metrics


def test_weights_3_1_reach_the_metrics_and_the_log(tmp_path):
    workdir = tmp_path / "mixture"
    harness.run(
        workdir,
        f"--config.corpus_dir={','.join(corpora())}",
        "--config.corpus_weights=3,1",
        "--config.vocab_size=500",
        "--config.num_train_steps=4",
        "--config.log_every=2",
        "--config.checkpoint_every=4",
        "--config.eval_every=4",
        "--config.eval_steps=1",
    )
    train = read_metrics(workdir)
    seen = {name: train[4][f"corpus/{name}/tokens_seen"] for name in ("corpus", "docs")}
    assert seen["corpus"] == 3 * seen["docs"] > 0
    assert train[2]["corpus/docs/tokens_seen"] * 2 == seen["docs"]
    evals = read_metrics(workdir, kind="eval")[4]
    for name in ("corpus", "docs"):
        assert evals[f"corpus/{name}/loss"] > 0 and evals[f"corpus/{name}/targets"] > 0
    log = harness.log_tail(workdir)
    assert "Mixture: corpus corpus (" in log and "6 of 8 streams a step (75.0% of the rows)" in log
    assert "Mixture: corpus docs (" in log and "2 of 8 streams a step (25.0% of the rows)" in log
