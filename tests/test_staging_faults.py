"""Staging a gs:// corpus under storage faults, through the fault proxy: transient faults
and a file that arrives damaged are fetched again; a file that stays different is refused;
`prepare --out gs://` uploads manifest.json last."""

import hashlib
import os

import pytest

from tests import gcs_emulator, gcs_faults
from tests.gcs_faults import Fault
from xlnet_jax import paths
from xlnet_jax.data import staging
from xlnet_jax.data.manifest import MANIFEST_FILE, Manifest
from xlnet_jax.errors import DataError

BUCKET = "xlnet-test-staging"
ROOT = f"gs://{BUCKET}"
FILES = {"xlnet_corpus/1.0.0/train.array_record": os.urandom(3000), "spm.model": b"tokenizer"}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    retry = "first_delay_s=0.05,max_delay_s=0.2,budget_s=30"
    cache = str(tmp_path_factory.mktemp("cache"))
    with gcs_faults.faulty_storage(
        seed=17, retry=retry, bucket=BUCKET, **{paths.CACHE_ENV: cache}
    ) as proxy:
        yield proxy


pytestmark = pytest.mark.usefixtures("fresh_proxy")


def _remote_corpus(name: str) -> Manifest:
    root = paths.as_path(f"{ROOT}/{name}")
    for relative, data in FILES.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    digests = {r: hashlib.sha256(d).hexdigest() for r, d in FILES.items()}
    dataset = next(r for r in FILES if r != "spm.model")
    return Manifest(
        path=str(root), format_version=1, vocab_size=7, special_ids={}, normalization={},
        inputs=[], splits={}, validation_fraction=0.1, seed=name.__hash__() % 1000,
        dataset={}, stats={},
        tokenizer={"file": "spm.model", "sha256": digests["spm.model"]},
        files={dataset: {"bytes": len(FILES[dataset]), "sha256": digests[dataset]}},
    )  # fmt: skip


def test_a_file_that_arrives_damaged_or_cut_is_fetched_again(proxy, caplog):
    manifest = _remote_corpus("staged")
    proxy.add(Fault("corrupt", classes=("read",), times=1))
    proxy.add(Fault("reset", classes=("read",), times=1))
    proxy.add(Fault("status", status=503, classes=("read",), times=1))
    staged = staging.stage_corpus(manifest)
    for relative, data in FILES.items():
        with open(os.path.join(staged.path, relative), "rb") as f:
            assert f.read() == data
    assert proxy.injected("corrupt") == 1 and proxy.injected() == 3, proxy.counts
    assert any(
        "arrived with another sha256 (fetch 1 of 3)" in r.getMessage() for r in caplog.records
    )


def test_a_file_that_stays_different_is_refused(proxy):
    manifest = _remote_corpus("changed")
    proxy.add(Fault("corrupt", classes=("read",), match="array_record"))
    with pytest.raises(DataError, match=f"sha256 differs .* in {staging.FETCHES} downloads"):
        staging.stage_corpus(manifest)
    assert proxy.injected("corrupt") == staging.FETCHES


def test_publishing_to_gs_uploads_the_manifest_last(proxy, tmp_path):
    order = []
    original = proxy._draw

    def recording(request_class, url):
        if request_class in ("write", "chunk"):
            order.append(url)
        return original(request_class, url)

    proxy._draw = recording
    try:
        proxy.add(Fault("status", status=503, classes=("write",), times=2))
        local = str(tmp_path / "local")
        for relative, data in {**FILES, MANIFEST_FILE: b"{}"}.items():
            os.makedirs(os.path.dirname(os.path.join(local, relative)), exist_ok=True)
            with open(os.path.join(local, relative), "wb") as f:
                f.write(data)
        staging.publish(local, f"{ROOT}/published")
    finally:
        proxy._draw = original
    assert MANIFEST_FILE in order[-1] and sum(MANIFEST_FILE in u for u in order) >= 1
    assert proxy.injected("503", "write") == 2
    published = gcs_emulator.download(proxy.upstream, BUCKET, "published/", tmp_path / "got")
    files = published.rglob("*")
    got = {p.relative_to(published).as_posix(): p.read_bytes() for p in files if p.is_file()}
    assert got == {**FILES, MANIFEST_FILE: b"{}"}
