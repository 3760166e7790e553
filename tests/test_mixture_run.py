"""A mixture of two corpora of different real text through `xlnet-jax train` (issue 62):
weights 3,1 give the rows, the tokens seen and a held-out loss per corpus in the metrics,
the start lines name each corpus's share, and a run SIGKILLed after a checkpoint resumes
bit for bit, memory included."""

import signal

import pytest

from tests import train_harness as harness
from tests.mixture_corpora import corpora
from xlnet_jax.training.metrics import read_metrics


def _mixture() -> list[str]:
    return [
        f"--config.corpus_dir={','.join(corpora())}",
        "--config.corpus_weights=3,1",
        "--config.vocab_size=500",
        "--config.num_train_steps=4",
        "--config.log_every=2",
        "--config.checkpoint_every=2",
        "--config.eval_every=4",
        "--config.eval_steps=1",
    ]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mixture") / "straight"
    harness.run(workdir, *_mixture())
    return workdir


def test_weights_3_1_reach_the_metrics_and_the_log(straight):
    train = read_metrics(straight)
    seen = {name: train[4][f"corpus/{name}/tokens_seen"] for name in ("corpus", "docs")}
    assert seen["corpus"] == 3 * seen["docs"] > 0
    assert train[2]["corpus/docs/tokens_seen"] * 2 == seen["docs"]
    evals = read_metrics(straight, kind="eval")[4]
    for name in ("corpus", "docs"):
        assert evals[f"corpus/{name}/loss"] > 0 and evals[f"corpus/{name}/targets"] > 0
    log = harness.log_tail(straight)
    assert "Mixture: corpus corpus (" in log and "6 of 8 streams a step (75.0% of the rows)" in log
    assert "Mixture: corpus docs (" in log and "2 of 8 streams a step (25.0% of the rows)" in log


def test_sigkill_after_a_checkpoint_then_resume_is_bit_exact(straight, tmp_path):
    workdir = tmp_path / "killed"
    process = harness.start(workdir, *_mixture(), step_delay=2.0)
    harness.wait_for(lambda: harness.checkpoint_done(workdir, 2), process, workdir)
    assert harness.kill(process, signal.SIGKILL) == -signal.SIGKILL
    assert not harness.checkpoint_done(workdir, 4)
    harness.run(workdir, *_mixture())
    assert harness.losses(workdir) == harness.losses(straight)
    assert (
        read_metrics(workdir)[4]["corpus/docs/tokens_seen"]
        == (read_metrics(straight)[4]["corpus/docs/tokens_seen"])
    )
    harness.assert_trees_equal(
        harness.checkpoint_arrays(workdir, 4), harness.checkpoint_arrays(straight, 4)
    )
