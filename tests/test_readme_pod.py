"""The README's and the manual's commands as written, after the quick start and
`source .venv/bin/activate`.

Each `xlnet-jax launch ... --dry-run` block of docs/tpu-pods.md shows exactly what the
launcher prints. Every command of every bash block (README.md, benchmarks/README.md,
docs/**/*.md but the pages tests/test_pages.py runs whole) names a program of the venv, and
either runs here verbatim or is listed in NOT_RUN_HERE with why and which test covers it
(tests/test_docs.py parses every `xlnet-jax` command of them); their pytest lines print
pytest's summary line.
"""

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.test_pages import text_not_run
from xlnet_jax.launch import pod

pytestmark = pytest.mark.usefixtures("committed_tree")
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
POD_PAGE = ROOT / "docs" / "tpu-pods.md"
READMES = [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

VENV_BIN = Path(sys.executable).parent  # the quick start's .venv, where the suite runs

# Commands run verbatim below, by their first words.
RUN_HERE = ("xlnet-jax --help",)
# (first words, why not here and what covers it) for every other command of a bash block.
NOT_RUN_HERE = {
    "python benchmarks/pretrain_vs_hf.py --out /tmp/pvh_real --steps 400": "two pretrainings "
    "and 18 fine-tunings (23 minutes on 2 cores); tests/test_benchmarks_smoke.py runs it for "
    "two steps of a one-layer model without fine-tuning",
    "python benchmarks/pretrain_steps.py --out /tmp/pst --steps 100,200,400,800": "one "
    "pretraining and 45 fine-tunings (about an hour on 2 cores); "
    "tests/test_benchmark_transfer_smoke.py runs it for two steps of a one-layer model and "
    "one task",
    "python benchmarks/pretrain_ablations.py --out /tmp/abl --steps 400": "four pretrainings, "
    "7 evals and 19 fine-tunings (about 66 minutes on 2 cores); "
    "tests/test_benchmark_transfer_smoke.py runs it for the default and one variant, two steps "
    "of a one-layer model, SST-2 only",
    "python benchmarks/pretrain_recipe.py --out /tmp/recipe --steps 400 --seeds 1": "12 "
    "pretrainings, 12 evals and 12 fine-tunings (40 minutes on 2 cores); "
    "tests/test_benchmark_recipe_smoke.py runs it for two recipes at one seed, two steps of "
    "a one-layer model, SST-2 only",
    "python benchmarks/finetune_vs_hf.py --out demo/vs_hf --init_from demo/run --steps 100 "
    "--batch_size 16 --seeds 3": "fine-tunes 24 runs (27 minutes on 2 cores); "
    "tests/test_benchmarks_smoke.py reads its files back through the GLUE readers",
    "bash scripts/demo.sh": "trains tiny for minutes; its numbers are the README's Demo "
    "result, and tests/test_own_text.py runs prepare -> train -> eval the same way",
    "bash scripts/test.sh": "is this suite (.ci/run runs it on a fresh clone)",
    "pip install": "changes the venv this suite runs in; the test extra holds the hf extra's "
    "torch and transformers, which tests/test_hf_io.py uses",
    "xlnet-jax prepare": "reads the user's text/*.txt (tests/test_own_text.py runs the own-text "
    "block's prepare on a fresh folder; tests/test_data_prepare.py the rest)",
    "xlnet-jax train": "base width on a CPU takes hours; the own-text block's train runs in "
    "tests/test_own_text.py (4 steps), init_from in tests/test_init_from.py",
    "xlnet-jax eval": "needs the base run; tests/test_it_learns.py runs eval on its own run",
    "xlnet-jax export-hf": "needs the base run; tests/test_hf_io.py exports a trained run",
    "xlnet-jax compile": "large on v3:16x32 compiles for 5-10 minutes here; "
    "tests/test_compile.py compiles tiny through the same code",
    "xlnet-jax launch": "needs gcloud; the pod blocks below run their --dry-run exactly",
    "python benchmarks/accelerator_throughput.py": "needs a GPU or TPU; "
    "tests/test_benchmarks_smoke.py runs it at toy size on the CPU",
    "python benchmarks/gpu_check.py": "needs an NVIDIA GPU for its figures; "
    "tests/test_benchmarks_smoke.py runs its CPU smoke pass",
    "python benchmarks/corpus_scale.py": "prepares a 50M-token corpus four times (minutes); "
    "tests/test_benchmarks_smoke.py runs its --smoke",
    "python benchmarks/host_share.py": "prepares a 4.6M-token corpus and trains on 1, 2 and 4 "
    "processes (minutes); tests/test_host_share.py measures 4 processes on a small corpus",
    "python3 -m venv": "makes a venv on a GPU machine (docs/gpus.md); scripts/venv.sh is "
    "this suite's",
    "python -c": "a one-line check on a GPU machine (docs/gpus.md)",
    "python scripts/fine_tune_hf.py": "needs a trained export and the user's task files; "
    "tests/test_init_from.py runs its fine_tune on an export of a trained run",
    "tensorboard": "a server that does not exit",
    "xlnet-jax finetune": "needs GLUE or RACE files and a pretrained model; "
    "tests/test_finetune_run.py runs finetune end to end on a tiny model and task",
    "python benchmarks/label_efficiency.py": "32 fine-tuning processes (50 minutes on 2 "
    "cores; its figures lead the Fine-tune page); tests/test_label_efficiency_smoke.py runs it "
    "at toy size: a one-layer model, two sizes, one seed, a two-rate grid, two steps",
    "python benchmarks/finetune_man_sections.py": "fine-tunes twice for minutes (its figures "
    "are the Fine-tune page's); tests/test_finetune_run.py runs the same command path",
    "python benchmarks/finetune_long_documents.py": "fine-tunes four times for minutes (the "
    "Fine-tune page's figures); tests/test_finetune_run.py checks the memory path",
    "python scripts/squad_from_dpkg.py": "reads this machine's dpkg database (the SQuAD "
    "page's task); tests/test_squad_data.py and test_squad_task.py read SQuAD 2.0 files",
    "python benchmarks/finetune_step.py": "times two frameworks for minutes (the Fine-tune "
    "page's table); tests/test_finetune_heads.py checks the same heads against HF",
}


def _blocks() -> list[tuple[list[str], str]]:
    """(launch argv, expected stdout) of each console block of the TPU pods page."""
    section = POD_PAGE.read_text()
    blocks = []
    for body in re.findall(r"```console\n(.*?)```", section, flags=re.DOTALL):
        lines = body.split("\n")
        end = next(i for i, line in enumerate(lines) if not line.endswith("\\"))
        command = " ".join(line.removesuffix("\\").strip() for line in lines[: end + 1])
        output = "\n".join(lines[end + 1 :])
        assert command.startswith("$ xlnet-jax launch "), command
        blocks.append((shlex.split(command)[3:], output))
    return blocks


def test_every_launch_block_is_what_the_launcher_prints(capsys):
    blocks = _blocks()
    assert len(blocks) == 7
    for argv, output in blocks:
        assert argv[-1] == "--dry-run"
        assert pod.main(argv) == 0, argv
        assert capsys.readouterr().out == output, argv


def _commands(path: Path) -> list[str]:
    """Each command of the file's bash blocks: continuations joined, comments dropped."""
    commands = []
    # The parts tests/test_pages.py runs block by block are not accounted here.
    for block in re.findall(r"```bash\n(.*?)```", text_not_run(path), flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                commands.append(" ".join(command.split()))
    return commands


def _first_words(command: str) -> str:
    for known in (*RUN_HERE, *NOT_RUN_HERE):
        if command == known or command.startswith(known + " "):
            return known
    raise AssertionError(f"{command!r}: neither run here nor listed in NOT_RUN_HERE")


def test_every_readme_command_is_a_venv_program_and_run_or_accounted_for():
    commands = [command for path in READMES for command in _commands(path)]
    assert len(commands) >= 15, commands
    listed = {_first_words(command) for command in commands}
    assert listed == {*RUN_HERE, *NOT_RUN_HERE}, "an entry matches no README command"
    for command in commands:
        program = command.split()[0]
        assert program in ("bash", "source") or (VENV_BIN / program).is_file(), command
        assert not program.startswith(".venv/"), f"{command!r}: the venv is active, no prefix"


def test_the_runnable_blocks_run_verbatim():
    """`xlnet-jax --help`, from the README's Using it block, as a user types it."""
    for command in RUN_HERE:
        assert command in _commands(README)
        done = subprocess.run(
            [str(VENV_BIN / command.split()[0]), *command.split()[1:]],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert all(name in done.stdout for name in ("prepare", "train", "compile", "launch"))


def test_readme_pytest_lines_end_with_the_summary_line(tmp_path):
    """pytest prints "N passed" at one -q, not at two: the README's lines and test.sh give
    one, and pyproject adds none. The README's parity line selects the parity tests (which
    the suite runs), and its options end a run with the summary line."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert "-q" not in options["ini_options"].get("addopts", "")
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    lines = [line for path in READMES for line in re.findall(r"`(pytest [^`]*)`", path.read_text())]
    lines += re.findall(r"^\.venv/bin/python -m (pytest .*)$", test_sh, flags=re.MULTILINE)
    assert len(lines) >= 2, lines
    for line in lines:
        assert line.split().count("-q") <= 1, line
    parity = shlex.split(next(line for line in lines if "test_model_parity" in line))[1:]
    pytest_ = str(VENV_BIN / "pytest")
    selected = subprocess.run(
        [pytest_, *parity, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )  # fmt: skip
    assert selected.returncode == 0, selected.stdout[-3000:]
    assert "test_model_parity.py::test_parity_with_hf[" in selected.stdout, selected.stdout
    # The same options, the file and -k swapped for one test that passes: the last line.
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    options = [word for word in parity if not word.startswith("tests/") and word != "parity"]
    options = [word for word in options if word != "-k"]
    done = subprocess.run(
        [pytest_, *options, "-p", "no:cacheprovider", "test_one.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"^\d+ passed(, \d+ deselected)? in ", done.stdout.splitlines()[-1])
