"""The tutorial pages run as written: every shell block of each tour's pages (or page
sections) in TOURS, in order, in one bash session (so a variable or a background job of one
block reaches the next), from a folder that holds the checkout's configs/ and benchmarks/ as
the pages' commands expect, with the quick start's venv active. A block a CI machine cannot
run is marked on its page (`<!--pytest.mark.skip(reason="...")-->`, with the test that
covers it) and named in SKIPPED.

The blocks are read by pytest-codeblocks' parser (`extract_from_file`), the maintained
reader of these markers. Its own runner is not used: it runs each block in a shell of its
own, where a page's `eval "$(...)"`, `&` and `$!` mean nothing to the next block; a tour is
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
    """What docs/getting-started.md's first run and the Fine-tune page's first fine-tuning
    say the reader sees."""
    assert "already complete at step 100" in out, out[-4000:]
    assert "torch.Size([1, " in out and ", 2000])" in out, out[-4000:]  # vocabulary 2000
    assert (folder / "first" / "hf" / "config.json").is_file()
    difference = re.search(r"largest logit difference .*: (\S+)$", out, flags=re.MULTILINE)
    assert difference and float(difference.group(1)) < 1e-4, out[-4000:]  # float32 rounding


# Each tour: the pages (or one section of a page, by its heading) whose blocks run in one
# session, in this order, and what the run must show beyond the blocks' exit status.
TOURS: dict[str, tuple[tuple[tuple[str, str | None], ...], Callable[[str, Path], None]]] = {
    "rehearse-pod": ((("docs/rehearse-pod.md", None),), _rehearsal_checks),
    "first-run": (
        (
            ("docs/getting-started.md", None),
            ("docs/fine-tuning.md", "## A first fine-tuning in two minutes"),
        ),
        _first_run_checks,
    ),
}
# Blocks marked skip on the pages, by page and first line: each says why on the page.
SKIPPED = {
    ("docs/rehearse-pod.md", "kill -STOP 4242; sleep 20; kill -CONT 4242"),
    ("docs/getting-started.md", "bash scripts/demo.sh"),
    ("docs/getting-started.md", "xlnet-jax --help"),
}


def _section_lines(page: str, heading: str | None) -> range:
    """The line numbers of `heading`'s section of the page (the whole page for None)."""
    lines = (ROOT / page).read_text().splitlines()
    if heading is None:
        return range(1, len(lines) + 1)
    start = lines.index(heading) + 1
    level = heading.split(" ")[0] + " "
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(level)), len(lines))
    return range(start, end + 1)


def _blocks(page: str, heading: str | None = None) -> list:
    inside = _section_lines(page, heading)
    return [b for b in extract_from_file(ROOT / page) if b.syntax in SHELLS and b.lineno in inside]


def text_not_run(path: Path) -> str:
    """The page's text without the parts the tours run (tests/test_readme_pod.py accounts
    for the rest of its commands)."""
    lines = path.read_text().splitlines()
    run = {
        n
        for parts, _ in TOURS.values()
        for page, heading in parts
        if ROOT / page == path
        for n in _section_lines(page, heading)
    }
    return "\n".join(line for n, line in enumerate(lines, 1) if n not in run) + "\n"


def _skipped(block) -> bool:
    marks = [mark for mark in block.marks if mark.startswith("pytest.mark.skip")]
    for mark in marks:
        assert re.search(r"reason=\"[^\"]{20,}\"", mark), f"a skip with no reason: {mark}"
    return bool(marks)


def test_the_pages_skip_only_the_blocks_named_here():
    skipped = {
        (page, block.code.splitlines()[0].split("  #")[0].strip())
        for parts, _ in TOURS.values()
        for page, heading in parts
        for block in _blocks(page, heading)
        if _skipped(block)
    }
    assert skipped == SKIPPED


def _script(parts) -> tuple[str, int]:
    """The tour's runnable blocks as one bash script, each after a line naming it; and how
    many blocks it runs."""
    lines, count = ["set -euo pipefail"], 0
    for page, heading in parts:
        for block in _blocks(page, heading):
            if not _skipped(block):
                lines += [f"echo '>>> {page}:{block.lineno}'", block.code]
                count += 1
    return "\n".join(lines) + "\n", count


@pytest.mark.parametrize("tour", sorted(TOURS))
def test_the_pages_run_block_by_block_in_order(tour, tmp_path):
    parts, check = TOURS[tour]
    for name in ("configs", "benchmarks"):  # what the pages' commands name, from the root
        (tmp_path / name).symlink_to(ROOT / name)
    script, count = _script(parts)
    (tmp_path / "tour.sh").write_text(script)
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(VENV_BIN.parent),
        "PYTHONPATH": str(ROOT),
    }
    run = subprocess.Popen(
        ["bash", "tour.sh"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = run.communicate(timeout=600)
    finally:  # what the pages left running (a failed page's emulator, launcher, trainers)
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out = stdout + stderr
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))
    ran = re.findall(r"^>>> (\S+)$", stdout, flags=re.MULTILINE)
    assert run.returncode == 0, (
        f"{tour}: stopped after block {ran[-1:]}:\n{out[-6000:]}\n{logs[-4000:]}"
    )
    assert len(ran) == count
    check(out + logs, tmp_path)
