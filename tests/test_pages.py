"""The tutorial pages run as written: every shell block of each page in PAGES, in the page's
order, in one bash session (so a variable or a background job of one block reaches the next),
from a folder that holds the checkout's configs/ as the page's commands expect, with the
quick start's venv active. A block a CI machine cannot run is marked on the page itself
(`<!--pytest.mark.skip(reason="...")-->`, with the test that covers it) and named here.

The blocks are read by pytest-codeblocks' parser (`extract_from_file`), the maintained
reader of these markers. Its own runner is not used: it runs each block in a shell of its
own, where a page's `eval "$(...)"`, `&` and `$!` mean nothing to the next block; a page is
one session, as a reader's terminal is.
"""

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent  # the quick start's .venv, where the suite runs
SHELLS = ("bash", "sh")


def _rehearsal_checks(out: str, folder: Path) -> None:
    """What docs/rehearse-pod.md says the reader sees."""
    assert "training again in 5 s on every process" in out, out[-4000:]
    assert "exit code 130" in out and "all 2 processes finished" in out, out[-4000:]
    log = folder / "xlnet-jax-logs" / "xlnet-rehearsal" / "run" / "process_0.log"
    *_, resumed, extended = log.read_text().split("==== xlnet-jax launch: a new start")
    assert "Resumed from step" in resumed, resumed[-3000:]
    assert "Took over the stale workdir lease" not in resumed, "a clean stop left its lease"
    assert "step 60/60" in resumed, resumed[-3000:]
    assert "Resumed from step 60" in extended and "step 80/80" in extended, extended[-3000:]


def _first_run_checks(out: str, folder: Path) -> None:
    """What docs/getting-started.md's first run says the reader sees."""
    assert "already complete at step 100" in out, out[-4000:]
    assert "torch.Size([1, " in out and ", 2000])" in out, out[-4000:]  # vocabulary 2000
    assert (folder / "first" / "hf" / "config.json").is_file()


# Page -> what its run must show beyond the blocks' exit status.
PAGES: dict[str, Callable[[str, Path], None]] = {
    "docs/rehearse-pod.md": _rehearsal_checks,
    "docs/getting-started.md": _first_run_checks,
}
# Blocks marked skip on the pages, by page and first line: each says why on the page.
SKIPPED = {
    ("docs/rehearse-pod.md", "kill -STOP 4242; sleep 20; kill -CONT 4242"),
    ("docs/getting-started.md", "bash scripts/demo.sh"),
    ("docs/getting-started.md", "xlnet-jax --help"),
}


def _blocks(page: str) -> list:
    return [b for b in extract_from_file(ROOT / page) if b.syntax in SHELLS]


def _skipped(block) -> bool:
    marks = [mark for mark in block.marks if mark.startswith("pytest.mark.skip")]
    for mark in marks:
        assert re.search(r"reason=\"[^\"]{20,}\"", mark), f"a skip with no reason: {mark}"
    return bool(marks)


def test_the_pages_skip_only_the_blocks_named_here():
    skipped = {
        (page, block.code.splitlines()[0].split("  #")[0].strip())
        for page in PAGES
        for block in _blocks(page)
        if _skipped(block)
    }
    assert skipped == SKIPPED


def _script(page: str) -> str:
    """The page's runnable blocks as one bash script, each after a line naming it."""
    parts = ["set -euo pipefail"]
    for block in _blocks(page):
        if not _skipped(block):
            parts.append(f"echo '>>> {page}:{block.lineno}'")
            parts.append(block.code)
    return "\n".join(parts) + "\n"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_runs_block_by_block_in_order(page, tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "page.sh").write_text(_script(page))
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(VENV_BIN.parent),
        "PYTHONPATH": str(ROOT),
    }
    run = subprocess.Popen(
        ["bash", "page.sh"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = run.communicate(timeout=600)
    finally:  # what the page left running (a failed page's emulator, launcher, trainers)
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out = stdout + stderr
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))
    ran = re.findall(r"^>>> (\S+)$", stdout, flags=re.MULTILINE)
    assert run.returncode == 0, (
        f"{page}: stopped after block {ran[-1:]}:\n{out[-6000:]}\n{logs[-4000:]}"
    )
    assert len(ran) == sum(not _skipped(b) for b in _blocks(page))
    PAGES[page](out + logs, tmp_path)
