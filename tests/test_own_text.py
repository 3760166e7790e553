"""The manual's "Train on your own text": a fresh folder of text -> prepare -> train, first try.

The commands are docs/own-text.md's, run as a user would (no JAX_PLATFORMS set), with fewer
steps; the output must also hold no line from libtpu, which the test extra installs.
"""

import pathlib
import re
import subprocess
import sys

from tests import test_data_common, train_harness

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "own-text.md"


def recipe() -> list[str]:
    """The commands of the page's first bash block."""
    block = PAGE.read_text().split("```bash\n", 1)[1]
    return [line for line in block.split("```", 1)[0].splitlines() if line.strip()]


def run(command: str, tmp_path) -> str:
    """One `xlnet-jax ...` line of the recipe, from the repository root, its folders in tmp."""
    for name in ("mytext", "mycorpus", "runs/mine"):
        command = command.replace(name, str(tmp_path / name))
    env = train_harness.environment()
    del env["JAX_PLATFORMS"]  # as on a user's CPU machine
    args = [sys.executable, "-m", "xlnet_jax.cli", *(a.strip("'") for a in command.split()[1:])]
    done = subprocess.run(
        args, cwd=train_harness.REPO, env=env, capture_output=True, text=True, timeout=400
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command}:\n{output[-3000:]}"
    return output


# What libtpu prints when it probes a CPU machine for a TPU.
LIBTPU_NOISE = re.compile(r"libtpu|TPU_|accelerator type|E0000|Source Location Trace|InitGoogle")


def test_readme_recipe_trains_on_a_fresh_folder_of_text_and_is_quiet_on_cpu(tmp_path):
    text = pathlib.Path(test_data_common.english_text()).read_text()
    documents = text.split("\n\n")
    (tmp_path / "mytext").mkdir()
    for i in range(3):  # three files of whole documents, ~50 kB each
        (tmp_path / "mytext" / f"part{i}.txt").write_text("\n\n".join(documents[i::3]))
    prepare, train = recipe()
    assert prepare.startswith("xlnet-jax prepare ") and train.startswith("xlnet-jax train ")
    output = run(prepare, tmp_path)
    output += run(f"{train} --config.num_train_steps=4", tmp_path)
    assert "step 4/4 | loss" in output and "eval at step 4" in output
    noise = [line for line in output.splitlines() if LIBTPU_NOISE.search(line)]
    assert noise == [], noise
    assert (tmp_path / "runs" / "mine" / "config.json").is_file()
