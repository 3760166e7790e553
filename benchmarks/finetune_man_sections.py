"""A real labelled task from text nobody wrote for this project: which manual section a man
page comes from, told from its DESCRIPTION alone.

The pages are this machine's English manual (/usr/share/man/manN/*.gz): sections 1 (user
commands), 3 (library functions), 7 (overviews, conventions) and 8 (administration
commands), up to --per_section pages each with at least 20 words of DESCRIPTION. The troff
markup is stripped, and so are cross references like "sh(1)", which would give the section
away; the first --words words are the text. Pages go to train or dev by a hash of their
name (80/20). Then the same fine-tuning runs twice, from --init_from's weights and from
random weights of its shape (`--random_weights`), and the dev accuracies print side by side.

    python benchmarks/finetune_man_sections.py --init_from demo/run --out /tmp/man
"""

import argparse
import gzip
import hashlib
import os
import re
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.finetune_runs import finetune  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

SECTIONS = ("1", "3", "7", "8")
_FONT = re.compile(r"\\f(\[[^\]]*\]|\(..|.)")  # \fB, \f(CW, \f[I]
_ESCAPE = re.compile(r"\\(\(..|\[[^\]]*\]|[-&e|^ 0%])")  # \(em, \[rs], \-, \&, \e, ...
_REFERENCE = re.compile(r"\s*\(\s*\d\w*\s*\)")  # sh(1), "sh (1)", printf(3p)
_MACRO = re.compile(r"^\.(B|I|BR|RB|IR|RI|BI|IB|SM|SB)\s+")


def description(page: str) -> str:
    """The DESCRIPTION section of a troff page as plain words ("" if it has none)."""
    words, inside = [], False
    for line in page.splitlines():
        if line.startswith((".SH", ".Sh")):
            inside = "DESCRIPTION" in line.upper()
            continue
        if not inside or line.startswith(("'\\\"", '.\\"')):
            continue
        if line.startswith(".") and not _MACRO.match(line):
            continue  # layout macros (.PP, .TP, .IP, ...) carry no text
        text = _MACRO.sub("", line).replace('"', " ")
        text = _REFERENCE.sub("", _ESCAPE.sub(" ", _FONT.sub("", text)))
        words += text.split()
    return " ".join(words)


def pages(root: str, section: str, per_section: int, words: int) -> list[tuple[str, str]]:
    """(name, text) of up to per_section pages of one section, in sorted name order."""
    folder = os.path.join(root, f"man{section}")
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".gz"):
            continue
        try:
            page = gzip.open(os.path.join(folder, name), "rt", errors="replace").read()
        except (OSError, EOFError):
            continue
        text = description(page).split()
        if len(text) >= 20 and not page.lstrip().startswith(".so"):
            found.append((name, " ".join(text[:words])))
    rng = np.random.default_rng(int(section))
    picked = rng.permutation(len(found))[:per_section]
    return [found[i] for i in sorted(picked)]


def write_task(root: str, out: str, per_section: int, words: int) -> dict[str, int]:
    """train.tsv and dev.tsv (LABEL<TAB>TEXT); returns the line count of each."""
    os.makedirs(out, exist_ok=True)
    lines = {"train": [], "dev": []}
    for section in SECTIONS:
        for name, text in pages(root, section, per_section, words):
            dev = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0
            lines["dev" if dev else "train"].append(f"man{section}\t{text}")
    for split, rows in lines.items():
        order = np.random.default_rng(len(rows)).permutation(len(rows))
        with open(os.path.join(out, f"{split}.tsv"), "w") as f:
            f.write("\n".join(rows[i] for i in order) + "\n")
    return {split: len(rows) for split, rows in lines.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init_from", help="pretraining workdir or HF dir")
    parser.add_argument(
        "--build_only", action="store_true", help="only write OUT/data/{train,dev}.tsv"
    )
    parser.add_argument("--out", required=True, help="where the task and the runs go")
    parser.add_argument("--man", default="/usr/share/man")
    parser.add_argument("--per_section", type=int, default=500)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    data = os.path.join(args.out, "data")
    counts = write_task(args.man, data, args.per_section, args.words)
    if args.build_only:
        print(f"{data}: {counts['train']} train and {counts['dev']} dev pages")
        return
    if args.init_from is None:
        parser.error("--init_from is required unless --build_only")
    flags = [
        "--config", "configs/finetune/cpu.py", "--task_name", "classification",
        "--data_dir", data, "--init_from", args.init_from,
        f"--config.seq_len={args.seq_len}", f"--config.num_train_steps={args.steps}",
        f"--config.learning_rate={args.lr}", f"--config.checkpoint_every={args.steps}",
        f"--config.warmup_steps={args.steps // 10}", f"--seeds={args.seeds}",
    ]  # fmt: skip
    pretrained = finetune(os.path.join(args.out, "pretrained"), *flags)
    random = finetune(os.path.join(args.out, "random"), *flags, "--random_weights")
    print(machine())
    print(
        f"\nman page section from its DESCRIPTION ({', '.join('man' + s for s in SECTIONS)}): "
        f"{counts['train']} train, {counts['dev']} dev pages; {args.steps} steps, batch 32, "
        f"seq_len {args.seq_len}; chance {1 / len(SECTIONS):.2f}\n"
    )
    print("| start | dev accuracy | dev loss | ms/step |")
    print("|---|---|---|---|")
    for name, result in (("pretrained (--init_from)", pretrained), ("random weights", random)):
        dev = result["dev"] if "dev" in result else result["median"]["dev"]
        print(f"| {name} | {dev['accuracy']:.3f} | {dev['loss']:.3f} | "
              f"{result['ms_per_step']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
