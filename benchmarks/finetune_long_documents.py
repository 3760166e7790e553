"""Long documents through the recurrence memory: a label that a part far from the head decides.

Two tasks (--task), each a document of `--segments` x seq_len tokens whose last segment the
head reads, so the label is learnable only if the memory carries the deciding part there:
- keyword (the unit check): filler words; one key word ("north" or "south") among the first
  8 words decides the label. Rows: each memory length (0: the last segment alone; seq_len;
  seq_len * (segments - 1): every earlier position), plus the one-segment reading.
- man (real text): two sentences from the DESCRIPTION of a man page of section 1 (user
  commands) or 3 (library functions) decide the label; section-neutral licence text
  (/usr/share/common-licenses) fills the rest. --layouts places the deciding sentences:
  "first" (the first segment), "middle" (segment (segments - 1) // 2), "question" (a page
  of each section in the first segment, and a question at the end asks which section the
  first, or the second, is from), "race" (RACE's case in RACE's own files, --task_name
  race: a passage of a page's two DESCRIPTION sentences, of section 1, 3, 7 or 8, and the
  licence text after them, as long as one row of --passage_segments x seq_len holds; the
  question asks which section the page at the passage's start is from, the four sections'
  titles as options (man's own names, shuffled per question); each segment is a row of a
  window of the passage with the question and option, so --segments windows hold less than
  --segments x seq_len of passage). Rows per layout: the deciding part read in one segment
  (classification: directly, the deciding sentences and the question without the filler;
  race: the passage truncated to fit, the original's reading, which keeps the deciding
  sentences), all segments with memory (every earlier position) for each mem_gradient, and
  all segments without memory.
Each row is one `xlnet-jax finetune` run; dev accuracy per row.
First, the cost side: the train step's time and XLA's memory per (num_segments, mem_len,
mem_gradient), all settings compiled in one process and called in turn (--time_only stops
there; --time_iters 0 skips it).

    python benchmarks/finetune_long_documents.py --init_from demo/run --out /tmp/longdoc
    python benchmarks/finetune_long_documents.py --init_from demo/run --out /tmp/man \
        --task man --seq_len 64
    python benchmarks/finetune_long_documents.py --init_from demo/run --out /tmp/race \
        --task man --layouts race --segments 2 --seq_len 64 --batch 8 --lr 5e-4 --time_iters 0 \
        --steps 1200 --seeds 3 --rows truncated,memory_gradient
"""

import argparse
import functools
import glob
import hashlib
import json
import os
import re
import statistics
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.finetune_man_sections import pages  # noqa: E402
from benchmarks.finetune_runs import finetune  # noqa: E402
from benchmarks.harness import machine  # noqa: E402

KEYS = ("north", "south")
FILLER = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so what more will some out up other into time could them two may then do first any "
    "my now such like our over man me even most made after also did many before must through"
).split()


def write_task(out: str, words: int, train: int, dev: int, seed: int) -> None:
    """train.tsv and dev.tsv: LABEL<TAB>TEXT, the key word among the first 8 words."""
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    for split, count in (("train", train), ("dev", dev)):
        lines = []
        for _ in range(count):
            label = int(rng.integers(2))
            text = list(rng.choice(FILLER, words))
            text[int(rng.integers(8))] = KEYS[label]
            lines.append(f"{KEYS[label]}\t{' '.join(text)}")
        with open(os.path.join(out, f"{split}.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")


MAN_SECTIONS = ("1", "3")
QUESTION = "Question: which manual section is the {} passage above from?"


class Composer:
    """Documents of an exact token budget, from word lists, by the tokenizer of --init_from.

    A text is left-padded to segments x seq_len (features.pair_row), so a document of
    capacity - 2 tokens (<sep> and <cls> end the row) puts each part where it was planned.
    """

    def __init__(self, init_from: str, licences: str):
        from xlnet_jax.finetune.text import TextEncoder
        from xlnet_jax.run.init_from import load_source

        source = load_source(init_from)
        self.encoder = TextEncoder(source.tokenizer, **(source.normalization or {}))
        files = sorted(f for f in glob.glob(os.path.join(licences, "*")) if os.path.isfile(f))
        self.filler = " ".join(open(f, errors="replace").read() for f in files).split()
        lengths = self.encoder.encode_many(sorted(set(self.filler)))
        self.pieces = dict(zip(sorted(set(self.filler)), map(len, lengths), strict=True))

    def tokens(self, text: str) -> int:
        return len(self.encoder.encode(text))

    def cut(self, text: str, budget: int) -> str:
        """The longest prefix of text's words within `budget` tokens."""
        words = text.split()
        while words and self.tokens(" ".join(words)) > budget:
            words.pop()
        return " ".join(words)

    def fill(self, rng: np.random.Generator, budget: int) -> str:
        """Consecutive licence words from a random place, within `budget` tokens."""
        start, words, used = int(rng.integers(len(self.filler))), [], 0
        while True:
            word = self.filler[(start + len(words)) % len(self.filler)]
            if used + self.pieces[word] > budget:
                return " ".join(words)
            words.append(word)
            used += self.pieces[word]


@functools.cache
def _pages(root: str, section: str, per_section: int) -> list[tuple[str, str]]:
    return pages(root, section, per_section, 80)


def _sentences(text: str, count: int) -> str:
    return " ".join(re.split(r"(?<=[.!?])\s+", text)[:count])


def man_documents(args, composer: Composer, layout: str, direct: bool, split: str) -> list[str]:
    """LABEL<TAB>TEXT lines of one split (pages by a hash of their name, 80/20)."""
    seq_len, segments = args.seq_len, args.segments
    capacity = seq_len * segments - 2
    rng = np.random.default_rng([args.seed, len(split), len(layout)])
    found = []
    for section in MAN_SECTIONS:
        for name, text in _pages(args.man, section, args.per_section):
            dev = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0
            if dev == (split == "dev"):
                found.append((f"man{section}", _sentences(text, 2)))
    lines = []
    if layout == "question":
        question_budget = composer.tokens(QUESTION.format("second"))
        budget = (seq_len - 2 - question_budget) // 2
        by_section = [[t for label, t in found if label == f"man{s}"] for s in MAN_SECTIONS]
        for label, text in found:
            other = by_section[label == "man1"]
            pair = [(label, text), (f"man{MAN_SECTIONS[label == 'man1']}", rng.choice(other))]
            order = rng.permutation(2)
            asked = int(rng.integers(2))
            parts = [composer.cut(pair[i][1], budget) for i in order]
            question = QUESTION.format(("first", "second")[asked])
            used = sum(map(composer.tokens, [*parts, question]))
            middle = [] if direct else [composer.fill(rng, capacity - used)]
            lines.append(f"{pair[order[asked]][0]}\t{' '.join([*parts, *middle, question])}")
        return lines
    for label, text in found:
        part = composer.cut(text, seq_len - 8)
        if direct:
            lines.append(f"{label}\t{part}")
            continue
        before = "" if layout == "first" else composer.fill(rng, seq_len * ((segments - 1) // 2))
        used = composer.tokens(" ".join([before, part]))
        lines.append(f"{label}\t{' '.join([before, part, composer.fill(rng, capacity - used)])}")
    return lines


def write_man_task(args, composer: Composer, out: str, layout: str, direct: bool) -> dict:
    """train.tsv and dev.tsv of one layout (direct: without the filler); line counts."""
    os.makedirs(out, exist_ok=True)
    counts = {}
    for split in ("train", "dev"):
        lines = man_documents(args, composer, layout, direct, split)
        order = np.random.default_rng(len(lines)).permutation(len(lines))
        with open(os.path.join(out, f"{split}.tsv"), "w") as f:
            f.write("\n".join(lines[i].strip() for i in order) + "\n")
        counts[split] = len(lines)
    return counts


RACE_SECTIONS = {  # man's own title of each section: the options
    "1": "executable programs or shell commands",
    "3": "library calls",
    "7": "miscellaneous",
    "8": "system administration commands",
}
RACE_QUESTION = "Question: the passage starts with a page of _."


def race_articles(args, composer: Composer, split: str, direct: bool) -> list[tuple[str, dict]]:
    """(file name, RACE article) of one split: one question each, the passage as long as
    every option's row of passage_segments x seq_len (passage <sep> question <sep> <cls>)
    allows (direct: the deciding sentences alone)."""
    qas = [RACE_QUESTION.replace("_", title) for title in RACE_SECTIONS.values()]
    longest = max(map(composer.tokens, qas))
    rng = np.random.default_rng([args.seed, len(split)])
    articles = []
    for section in RACE_SECTIONS:
        for name, text in _pages(args.man, section, args.per_section):
            digest = int(hashlib.sha256(name.encode()).hexdigest(), 16)
            if (digest % 5 == 0) != (split == "dev"):
                continue
            part = composer.cut(_sentences(text, 2), args.seq_len - 3 - longest)
            used = composer.tokens(part)
            room = 0 if direct else args.seq_len * args.passage_segments - 3 - longest - used
            order = [list(RACE_SECTIONS)[i] for i in rng.permutation(len(RACE_SECTIONS))]
            article = {
                "article": f"{part} {composer.fill(rng, room)}".strip(),
                "questions": [RACE_QUESTION],
                "options": [[RACE_SECTIONS[s] for s in order]],
                "answers": ["ABCD"[order.index(section)]],
                "id": name,
            }
            articles.append((f"{('middle', 'high')[digest // 5 % 2]}/{section}_{name}", article))
    return articles


def write_race_task(args, composer: Composer, out: str, direct: bool) -> dict:
    """OUT/{train,dev}/{middle,high}/*.txt, RACE's layout; question counts per split."""
    counts = {}
    for split in ("train", "dev"):
        for level in ("middle", "high"):
            os.makedirs(os.path.join(out, split, level), exist_ok=True)
        articles = race_articles(args, composer, split, direct)
        for name, article in articles:
            with open(os.path.join(out, split, f"{name}.txt"), "w") as f:
                json.dump(article, f)
        counts[split] = len(articles)
    return counts


def run(
    args,
    data: str,
    workdir: str,
    segments: int,
    mem_len: int,
    mem_gradient: bool = False,
    race: bool = False,
) -> dict:
    """One fine-tuning run: classification, or RACE (its question and option kept whole)."""
    task = ("race", f"--config.max_qa_length={args.seq_len // 2}") if race else ("classification",)
    return finetune(
        workdir,
        "--config", "configs/finetune/cpu.py", "--task_name", *task,
        "--data_dir", data, "--init_from", args.init_from,
        f"--config.seq_len={args.seq_len}", f"--config.num_segments={segments}",
        f"--config.mem_len={mem_len}", f"--config.mem_gradient={mem_gradient}",
        f"--config.num_train_steps={args.steps}",
        f"--config.batch_size={args.batch}", f"--config.learning_rate={args.lr}",
        "--config.log_every=10", f"--config.checkpoint_every={args.steps}",
        f"--seeds={args.seeds}",
    )  # fmt: skip


def dev_accuracy(result: dict) -> float:
    return (result["dev"] if "dev" in result else result["median"]["dev"])["accuracy"]


def time_settings(args, settings: list[tuple[int, int, bool]]) -> tuple[dict, dict]:
    """Seconds of the train step per (num_segments, mem_len, mem_gradient), measured in this
    process with the settings' steps called in turn (so the machine's load falls on all
    alike), and XLA's (temporary, peak) bytes of each compiled step."""
    import jax

    from xlnet_jax.finetune.compile import example_batch
    from xlnet_jax.finetune.config import finetune_config
    from xlnet_jax.finetune.prepare import with_source_architecture
    from xlnet_jax.finetune.program import build
    from xlnet_jax.finetune.registry import get_task
    from xlnet_jax.run.init_from import load_source
    from xlnet_jax.training import sharding

    task, source = get_task("classification"), load_source(args.init_from)
    steps, memory = {}, {}
    for segments, mem_len, mem_gradient in settings:
        config = with_source_architecture(finetune_config(), source)
        config.seq_len, config.batch_size = args.seq_len, args.batch
        config.num_segments, config.mem_len = segments, mem_len
        config.mem_gradient = mem_gradient
        batch = example_batch(task, config)
        program = build(config, task, ["a", "b"], sharding.make_mesh(config), batch)
        with program.activate():
            state, placed = program.init_state(), program.put_batch(batch)
            analysis = program.train_step.lower(state, placed).compile().memory_analysis()
            for _ in range(2):  # compile, warm up
                state, metrics = program.train_step(state, placed)
        memory[segments, mem_len, mem_gradient] = (
            analysis.temp_size_in_bytes,
            analysis.argument_size_in_bytes + analysis.output_size_in_bytes
            + analysis.temp_size_in_bytes - analysis.alias_size_in_bytes,
        )  # fmt: skip
        steps[segments, mem_len, mem_gradient] = (program, state, placed)
    times = {key: [] for key in settings}
    for _ in range(args.time_iters):
        for key, (program, state, placed) in steps.items():
            with program.activate():
                start = time.perf_counter()
                state, metrics = program.train_step(state, placed)
                jax.block_until_ready(metrics)
                times[key].append(time.perf_counter() - start)
            steps[key] = (program, state, placed)
    return times, memory


def print_cost(args) -> None:
    """The step-time and memory table of the settings the rows use."""
    full = args.seq_len * (args.segments - 1)
    timing = [(1, 0, False), (2, 0, False), (2, args.seq_len, False), (4, 0, False)]
    timing += [(4, args.seq_len, False), (args.segments, full, False), (args.segments, full, True)]
    times, memory = time_settings(args, timing)
    print(machine())
    print(
        f"\ntrain step, batch {args.batch} texts, seq_len {args.seq_len}, median of "
        f"{args.time_iters} steps, settings called in turn; XLA's memory of each step\n"
    )
    print("| num_segments | mem_len | mem_gradient | ms/step | against one segment | "
          "temporary MiB | peak MiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    one = statistics.median(times[1, 0, False])
    for (segments, mem_len, mem_gradient), seconds in times.items():
        median = statistics.median(seconds)
        temp, peak = memory[segments, mem_len, mem_gradient]
        print(f"| {segments} | {mem_len} | {str(mem_gradient).lower()} | {1e3 * median:.0f} | "
              f"{median / one:.2f}x | {temp / 2**20:.1f} | {peak / 2**20:.1f} |")  # fmt: skip


def keyword_rows(args) -> None:
    data = os.path.join(args.out, "data")
    # About 1.3 pieces a filler word: enough words that every document fills all segments.
    write_task(data, 2 * args.seq_len * args.segments, args.train, args.dev, args.seed)
    settings = [(args.segments, m) for m in (0, args.seq_len, args.seq_len * (args.segments - 1))]
    rows = []
    for segments, mem_len in [*settings, (1, 0)]:
        name = f"s{segments}_m{mem_len}"
        result = run(args, data, os.path.join(args.out, name), segments, mem_len)
        rows.append((segments, mem_len, result))
    print(machine())
    print(f"\ndocuments of {args.segments} x seq_len {args.seq_len} tokens, key word in the "
          f"first 8 words; {args.steps} steps of batch {args.batch}; chance 0.5\n")  # fmt: skip
    print("| num_segments | mem_len | tokens read | dev accuracy | ms/step (in the run) |")
    print("|---|---|---|---|---|")
    for segments, mem_len, result in rows:
        note = " (the first segment only)" if segments == 1 else ""
        print(
            f"| {segments} | {mem_len} | {segments * args.seq_len}{note} | "
            f"{dev_accuracy(result):.3f} | {result['ms_per_step']:.0f} |"
        )


MAN_ROWS = {  # name -> (direct, all segments?, memory?, mem_gradient)
    "direct": (True, False, False, False),
    "truncated": (False, False, False, False),
    "memory_gradient": (False, True, True, True),
    "memory": (False, True, True, False),
    "no_memory": (False, True, False, False),
}


def layout_rows(args, layout: str) -> list[str]:
    """The rows asked for (--rows), else a layout's own: RACE's reading of one segment is
    its own passage truncated, the others' the deciding part without the filler."""
    if args.rows:
        return args.rows.split(",")
    return [("truncated" if layout == "race" else "direct"), *list(MAN_ROWS)[2:]]


def man_rows(args) -> None:
    composer = Composer(args.init_from, args.licences)
    full = args.seq_len * (args.segments - 1)
    table = []
    for layout in args.layouts.split(","):
        for name in layout_rows(args, layout):
            direct, segmented, memory, mem_gradient = MAN_ROWS[name]
            data = os.path.join(args.out, f"data_{layout}_{'direct' if direct else 'long'}")
            if layout == "race":
                counts = write_race_task(args, composer, data, direct)
            else:
                counts = write_man_task(args, composer, data, layout, direct)
            segments = args.segments if segmented else 1
            mem_len = full if memory else 0
            workdir = os.path.join(args.out, f"{layout}_{name}")
            result = run(args, data, workdir, segments, mem_len, mem_gradient, layout == "race")
            table.append((layout, name, segments, mem_len, mem_gradient, counts, result))
    print(machine())
    print(f"\nman page section from two DESCRIPTION sentences (1 or 3; race: 1, 3, 7 or 8), "
          f"licence text filling {args.segments} x seq_len {args.seq_len}; {args.steps} steps of "
          f"batch {args.batch}, {args.seeds} seed(s); chance 0.5 (race: 0.25)\n")  # fmt: skip
    print("| layout | reading | num_segments | mem_len | mem_gradient | train/dev | "
          "dev accuracy | ms/step (in the run) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for layout, name, segments, mem_len, mem_gradient, counts, result in table:
        print(f"| {layout} | {name} | {segments} | {mem_len} | {str(mem_gradient).lower()} | "
              f"{counts['train']}/{counts['dev']} | {dev_accuracy(result):.3f} | "
              f"{result['ms_per_step']:.0f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init_from", required=True, help="pretraining workdir or HF dir")
    parser.add_argument("--out", required=True, help="where the task and the runs go")
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--dev", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time_iters", type=int, default=20, help="timed steps per setting")
    parser.add_argument("--time_only", action="store_true", help="only the cost table")
    parser.add_argument("--task", choices=("keyword", "man"), default="keyword")
    parser.add_argument(
        "--layouts", default="first,middle,question", help="man: comma list (or race)"
    )
    parser.add_argument("--rows", help=f"man: comma list of {', '.join(MAN_ROWS)}")
    parser.add_argument("--per_section", type=int, default=600, help="man: pages a section")
    parser.add_argument(
        "--passage_segments", type=int, help="race: passage length in rows (default --segments)"
    )
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--man", default="/usr/share/man")
    parser.add_argument("--licences", default="/usr/share/common-licenses")
    args = parser.parse_args()
    args.passage_segments = args.passage_segments or args.segments
    if args.time_iters:
        print_cost(args)
    if args.time_only:
        return
    (man_rows if args.task == "man" else keyword_rows)(args)


if __name__ == "__main__":
    main()
