"""SIGKILL at random steps and during a checkpoint write, then resume: nothing diverges.

Runs scripts/fault_injection.py (5 kills, one aimed at an in-flight asynchronous save)
against the shared uninterrupted reference run, and checks the pieces it relies on: the
comparison finds a changed loss, and metrics.jsonl survives a record torn by a kill.
"""

import importlib.util
import json
import logging
import re
import subprocess
import sys

from tests import train_harness as harness
from xlnet_jax.training.metrics import MetricsWriter, read_metrics

SCRIPT = harness.REPO / "scripts" / "fault_injection.py"


def load_script():
    """The script as a module, to test its comparison on its own."""
    spec = importlib.util.spec_from_file_location("fault_injection", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_five_sigkills_one_during_a_checkpoint_write_change_nothing(tmp_path):
    command = [
        sys.executable, str(SCRIPT),
        "--corpus_dir", harness.corpus_dir(),
        "--reference", str(harness.reference_run()),
        "--out", str(tmp_path / "fi"),
        "--kills", "5", "--seed", "0", "--checkpoint_every", "2",
        "--num_cpu_devices", "1", "--timeout", "400",
    ]  # fmt: skip
    result = subprocess.run(
        command, env=harness.environment(), capture_output=True, text=True, timeout=450
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "kills survived:                 5/5" in out, out
    assert int(re.search(r"kills during a checkpoint write: (\d+)", out).group(1)) >= 1, out
    assert re.search(r"divergences: +0 ", out), out
    # The aimed kill left orbax's unfinished directory of the step it interrupted.
    aimed = re.search(r"during write of step (\d+) +step \d+ +(\S+)", out)
    assert aimed and aimed.group(2).startswith(f"{aimed.group(1)}.orbax-checkpoint-tmp"), out


def test_script_help_and_bad_out(tmp_path):
    help_text = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert help_text.returncode == 0 and "--kills" in help_text.stdout
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("x")
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "--corpus_dir", "c", "--out", str(tmp_path / "used")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "is not empty" in refused.stderr


def test_comparison_catches_a_changed_loss(tmp_path):
    """The script's check is not vacuous: one changed loss is one divergence."""
    script = load_script()
    reference = harness.reference_run()
    assert script.divergences(reference, reference, 12) == []
    copy = harness.copy_run(reference, tmp_path / "copy")
    lines = (copy / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[4])
    record["loss"] = float(record["loss"]) + 2**-20
    lines[4] = json.dumps(record)
    (copy / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    found = script.divergences(reference, copy, 12)
    assert len(found) == 1 and found[0].startswith(f"step {record['step']}: loss"), found


def test_metrics_survive_a_record_torn_by_a_kill(tmp_path, caplog):
    """A kill mid-write leaves a partial last line; reading skips it, appending ends it."""
    writer = MetricsWriter(str(tmp_path))
    writer.write(1, {"loss": 2.5})
    writer.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "kind": "train", "lo')  # the kill lands here
    with caplog.at_level(logging.WARNING):
        assert sorted(read_metrics(str(tmp_path))) == [1]
    assert "Skipped 1 torn line" in caplog.text
    writer = MetricsWriter(str(tmp_path))  # the resumed run re-logs step 2, then step 1 again
    writer.write(2, {"loss": 2.25})
    writer.write(1, {"loss": 2.75})
    writer.close()
    records = read_metrics(str(tmp_path))
    assert {step: r["loss"] for step, r in records.items()} == {1: 2.75, 2: 2.25}
