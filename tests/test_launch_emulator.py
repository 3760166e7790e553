"""`xlnet-jax launch emulator`: the export lines it prints send a fresh process's gcsfs and
tensorstore clients to it, and SIGTERM stops it with exit code 0. The rehearsal's first
step, `prepare --out gs://`, names the bucket's corpus as its result."""

import re
import signal
import subprocess
import sys
import tempfile

from tests import gcs_emulator
from tests.test_data_common import write_documents
from xlnet_jax import cli
from xlnet_jax.launch import emulator, local

PROBE = """
import json, sys
import gcsfs, tensorstore as ts
fs = gcsfs.GCSFileSystem()
fs.pipe("gs://rehearsal-a/hello.txt", b"hi")
store = ts.open({"driver": "json", "kvstore": "gs://rehearsal-b/x.json"}, create=True).result()
store.write({"n": 3}).result()
print(fs.cat("gs://rehearsal-a/hello.txt").decode(), fs.ls("rehearsal-b"))
"""


def test_the_printed_variables_reach_a_running_emulator(tmp_path):
    port = local.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "xlnet_jax.launch.pod", "emulator", "--port", str(port),
         "--bucket", "rehearsal-a", "--bucket", "rehearsal-b"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = [server.stdout.readline() for _ in emulator.environment("x")]
        env = dict(re.fullmatch(r"export (\w+)=(\S+)\n", line).groups() for line in lines)
        assert env == emulator.environment(f"http://127.0.0.1:{port}")
        printed = subprocess.run(
            [sys.executable, "-m", "xlnet_jax.launch.pod", "emulator", "--print-env",
             "--port", str(port)], capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert printed == "".join(lines)
        probe = subprocess.run(
            [sys.executable, "-c", PROBE], env=env | {"PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr[-3000:]
        assert probe.stdout.split()[0] == "hi" and "rehearsal-b/x.json" in probe.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    assert "GCS emulator stopped" in server.stderr.read()


def test_a_taken_port_is_one_line(tmp_path):
    with emulator.running(["taken-port"]) as url:
        port = url.rsplit(":", 1)[1]
        done = subprocess.run(
            [sys.executable, "-m", "xlnet_jax.launch.pod", "emulator", "--port", port],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"xlnet-jax launch emulator: error: port {port} on 127.0.0.1 is taken (an emulator "
        "already running?); pass another --port."
    ]


def test_a_bad_bucket_name_is_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_jax.launch.pod", "emulator", "--port",
         str(local.free_port()), "--bucket", "B"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "xlnet-jax launch emulator: error: the emulator refused bucket 'B' (HTTP 400); a bucket "
        "name has 3-63 lowercase letters, digits, '-', '_' or '.'"
    ]


def test_prepare_into_the_bucket_prints_the_bucket_as_its_result(tmp_path, capsys):
    """docs/rehearse-pod.md's `prepare --out gs://`, in one process: the closing line names the
    gs:// corpus, and no local temporary path is printed as if it were the result (issue 38,
    item 6); the corpus is in the bucket, manifest.json included."""
    text = str(tmp_path / "text.txt")
    write_documents(text, [[f"Sentence {i} of a short document."] for i in range(20)])
    out = "gs://xlnet-rehearsal/corpus"
    with gcs_emulator.running("xlnet-rehearsal") as url, gcs_emulator.pointed_at(url):
        argv = ["prepare", "--out", out, text, "--vocab_size", "36", "--num_shards", "2"]
        assert cli.main(argv) == 0
        names = gcs_emulator.list_objects(url, "xlnet-rehearsal", "corpus/")
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(f"Prepared {out}: ")
    assert tempfile.gettempdir() not in err  # neither a scratch folder nor the input
    assert "corpus/manifest.json" in names and "corpus/spm.model" in names
