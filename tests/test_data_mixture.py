"""Pretraining on a mixture of corpora (issue 62): shares of the streams, one corpus per
row for the run, the same batches on any process count and after a restart, each host
staging only its share of each corpus, and a one-line refusal of each bad mixture."""

import re
import shutil

import numpy as np
import pytest
from test_data_common import ring_positions

from tests.mixture_corpora import corpora, second_corpus
from tests.sharded_corpus import sharded_corpus
from tests.train_config import small_config
from xlnet_jax import paths
from xlnet_jax.data import mixture, staging
from xlnet_jax.data.corpus import load_split
from xlnet_jax.data.manifest import load_manifest
from xlnet_jax.data.streams import StreamBatcher
from xlnet_jax.errors import ConfigError, DataError
from xlnet_jax.run.preflight import check_run

SEQ, REUSE = 64, 16


def mixed(dirs=None, split="train", **overrides) -> StreamBatcher:
    kwargs = dict(seq_len=SEQ, reuse_len=REUSE, global_batch=16, bi_data=False, seed=0)
    return StreamBatcher(dirs or corpora(), split, **{**kwargs, **overrides})


def test_weights_3_1_give_3_1_rows_every_step_each_row_from_its_corpus():
    """Weights 3,1 on two corpora of different text: 12 and 4 of 16 rows, and each row's
    text (reuse, A and B) is in its own corpus's ring and not in the other's, step after
    step (a row never changes corpus)."""
    b = mixed(corpus_weights=[3, 1])
    assert b.streams_per_corpus.tolist() == [12, 4]
    assert np.bincount(b.row_corpus).tolist() == [12, 4]
    rings = [np.asarray(load_split(load_manifest(d), "train").tokens) for d in corpora()]
    for t in (0, 1, 400):
        for row, ids in enumerate(b.batch(t)["input_ids"]):
            mine, other = rings[b.row_corpus[row]], rings[1 - b.row_corpus[row]]
            reuse = ids[:REUSE]
            assert ring_positions(mine, reuse) and not ring_positions(other, reuse)
    assert b.tokens_seen(10) == {"corpus": 12 * REUSE * 10, "docs": 4 * REUSE * 10}


def test_alpha_gives_the_n_to_the_alpha_shares():
    """corpus_alpha: p_i = n_i^a / sum_j n_j^a over the train splits' token counts, and the
    streams are those shares by largest remainder (numpy reference)."""
    n = [load_manifest(d).splits["train"]["tokens"] for d in corpora()]
    b = mixed(corpus_alpha=0.3, global_batch=64)
    reference = np.power(n, 0.3) / np.power(n, 0.3).sum()
    np.testing.assert_allclose(b.shares, reference, rtol=1e-12)
    quota = reference * 64
    want = np.floor(quota).astype(int)
    want[np.argsort(-(quota - want), kind="stable")[: 64 - want.sum()]] += 1
    assert b.streams_per_corpus.tolist() == want.tolist()
    # neither weights nor alpha: by token counts, as if the corpora were one
    np.testing.assert_allclose(mixed().shares, np.array(n) / sum(n))


def test_rounding_keeps_every_corpus_at_least_one_stream():
    assert mixture.apportion(np.array([0.98, 0.01, 0.01]), 3, "x").tolist() == [1, 1, 1]
    assert mixture.apportion(np.array([0.5, 0.3, 0.2]), 7, "x").tolist() == [4, 2, 1]
    with pytest.raises(ConfigError, match="3 corpora need at least one stream each, but x"):
        mixture.apportion(np.array([0.5, 0.3, 0.2]), 2, "x")


def test_one_directory_is_the_batcher_it_was():
    """One corpus, as a string, a one-element list or with a weight, reads the same arrays
    (the layout tests of test_data_streams.py pin those to the seeding before mixtures)."""
    kwargs = dict(global_batch=8, bi_data=True, num_data_shards=2, data_ranges=2)
    plain = mixed(sharded_corpus(), **kwargs)
    for other in (
        mixed([sharded_corpus()], **kwargs),
        mixed(sharded_corpus(), corpus_weights=[5])
        if False
        else mixed([sharded_corpus()], corpus_weights=[5.0], **kwargs),
    ):
        for t in (0, 9):
            for key, value in plain.batch(t).items():
                np.testing.assert_array_equal(value, other.batch(t)[key])


@pytest.mark.parametrize("bi_data", [False, True])
def test_mixed_batches_do_not_depend_on_the_process_count(bi_data):
    """1, 2 and 4 processes (data_ranges=4, as a 4-host run records; 2 with bi_data) give
    the same batches."""
    kwargs = dict(corpus_weights=[3, 1], data_ranges=4, bi_data=bi_data, num_data_shards=2)
    if bi_data:  # the bi_data rows of a process span two blocks (as test_data_streams.py)
        kwargs.update(global_batch=32, data_ranges=2)
    whole = mixed(**kwargs)
    for count in (2, 4):
        shares = [mixed(**kwargs, process_index=i, process_count=count) for i in range(count)]
        for t in (0, 5, 300):
            for key, value in whole.batch(t).items():
                np.testing.assert_array_equal(
                    value, np.concatenate([s.batch(t)[key] for s in shares])
                )


def test_a_restarted_batcher_resumes_bit_for_bit():
    """The position is a function of the step: batch(t) of a batcher made after a 'kill'
    equals the one a batcher that ran from step 0 reached."""
    first = mixed(corpus_weights=[3, 1])
    reached = [first.batch(t) for t in range(8)][-1]
    again = mixed(corpus_weights=[3, 1]).batch(7)
    for key, value in reached.items():
        np.testing.assert_array_equal(value, again[key])


def test_four_hosts_each_stage_only_their_share_of_each_corpus(tmp_path, monkeypatch):
    """4 simulated hosts (own cache roots), data_ranges=4, each staging both corpora from
    copies elsewhere (staging reads a local copy as it reads gs://): each downloads and
    caches 2 of the 8 train shards of each corpus, its own two."""
    remotes = []
    for k, directory in enumerate(corpora()):  # a local 'remote' copy, staged as gs:// is
        remote = str(tmp_path / f"published{k}")
        shutil.copytree(directory, remote, ignore=shutil.ignore_patterns("cache"))
        remotes.append(remote)
    host_shards = []
    for host in range(4):
        monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / f"host{host}"))
        staged = [staging.stage_corpus(load_manifest(r)).path for r in remotes]
        mixed(staged, corpus_weights=[3, 1], data_ranges=4, process_index=host, process_count=4)
        per_corpus = []
        for path in staged:
            shards = sorted(p.name for p in paths.as_path(path).glob("*/*/*-train.array_record-*"))
            caches = sorted(
                p.name.split("-", 1)[1] for p in (paths.as_path(path) / "cache").iterdir()
            )
            per_corpus.append((shards, caches))
        host_shards.append(per_corpus)
    for host, per_corpus in enumerate(host_shards):
        for shards, caches in per_corpus:
            assert [int(s.split("-")[-3]) for s in shards] == [2 * host, 2 * host + 1]
            assert caches == [f"train-{host}of4-starts.npy", f"train-{host}of4-tokens.npy"]


def preflight(dirs: str, **overrides) -> str:
    """The one-line ConfigError of check_run for a mixture config."""
    config = small_config(vocab_size=500, corpus_dir=dirs, **overrides)
    with pytest.raises(ConfigError) as info:
        check_run(config, 1, evaluates=False)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_good_mixture_passes_the_checks_with_one_fingerprint():
    config = small_config(vocab_size=500, corpus_dir=",".join(corpora()), corpus_weights="3,1")
    manifest, fingerprint = check_run(config, 1, evaluates=False)
    assert manifest.path == ",".join(corpora())
    assert (
        fingerprint
        != check_run(small_config(vocab_size=500, corpus_dir=sharded_corpus()), 1, evaluates=False)[
            1
        ]
    )


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (dict(spm_model=None), "different SentencePiece models (spm.model sha256)"),
        (dict(uncased=True), "different --uncased: False vs True"),
    ],
)
def test_corpora_with_another_tokenizer_are_refused_naming_both(options, words):
    other = second_corpus(**options)
    message = preflight(f"{sharded_corpus()},{other}")
    assert message.startswith(f"config.corpus_dir: {sharded_corpus()} and {other} were prepared")
    assert words in message and "--spm_model" in message


@pytest.mark.parametrize(
    ("corpus_dir", "overrides", "words"),
    [
        ("{a},{missing}", {}, "config.corpus_dir: {missing} is not a prepared corpus"),
        ("{a},{b}", dict(corpus_weights="3,0"), "config.corpus_weights: 0 in '3,0' is not a "),
        ("{a},{b}", dict(corpus_weights="3,-1"), "config.corpus_weights: -1 in '3,-1' is not a "),
        ("{a},{b}", dict(corpus_weights="3,1,1"), "has 3 weight(s) for the 2 corpora"),
        ("{a},{b}", dict(corpus_weights="3,1", corpus_alpha=0.3), "are both set; pass one"),
        ("{a},,{b}", {}, "has an empty entry"),
        ("{a},{b}", dict(batch_size=2, corpus_weights="3,1", data_ranges=2),
         "2 corpora need at least one stream each, but the 1 streams of one range block"),
        ("{a},{b}", dict(batch_size=4096, corpus_weights="1,30", reuse_len=16, seq_len=32),
         "the 'train' split has"),
    ],
)  # fmt: skip
def test_each_bad_mixture_is_one_line(tmp_path, corpus_dir, overrides, words):
    names = dict(a=sharded_corpus(), b=second_corpus(), missing=str(tmp_path / "nowhere"))
    message = preflight(corpus_dir.format(**names), **overrides)
    assert words.format(**names) in message, message


def test_a_corpus_too_small_for_its_rows_is_refused_by_the_batcher():
    """The batcher's own check names the corpus (preflight reports it before, one line)."""
    with pytest.raises(DataError, match=re.escape(f"split of {second_corpus()} has")):
        mixed(corpus_weights=[1, 30], global_batch=4096, seq_len=32)


def test_describe_names_each_corpus_and_a_small_one_read_many_times():
    lines = mixed(corpus_weights=[3, 1]).describe(num_steps=2000)
    assert len(lines) == 2
    assert lines[0].startswith(f"corpus corpus ({sharded_corpus()}): weight 0.750, 12 of 16 ")
    assert "(75.0% of the rows)" in lines[0] and "epochs in 2,000 steps" in lines[0]
    assert "a small corpus: docs is read" in lines[1]
