"""The manual: it builds with `mkdocs build --strict`, its reference pages come from the code,
and every `xlnet-jax` command it or a README shows parses with the real parsers, so a renamed
flag or config field breaks the suite, not the reader.

Commands are taken from fenced code blocks other than `text` ones (trees, usage synopses):
a line that starts with `xlnet-jax ` or `$ xlnet-jax `, backslash continuations joined,
shell comments dropped; and from inline code spans that are whole commands: a flag among
the arguments, no placeholder (`...`, `<...>`, `COMMAND`) and not ending with a bare flag
(`xlnet-jax compile --topology` names a flag, it is not a command). Each is parsed as
`python -m xlnet_jax.cli` would parse it, config file and `--config.FIELD=VALUE` overrides
included, without running it.
"""

import contextlib
import importlib.util
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from absl import flags

from xlnet_jax import cli
from xlnet_jax.errors import UsageError
from xlnet_jax.launch import pod

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted(DOCS.rglob("*.md"))]
PROGRAM = "xlnet-jax"
PLACEHOLDERS = ("...", "<", "COMMAND")


def _reference_hook():
    """docs/hooks/reference.py, the module mkdocs.yml names as a hook."""
    spec = importlib.util.spec_from_file_location("reference", DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _reference_hook()


def _command_words(line: str) -> list[str]:
    """The words of a shell line's first command: up to a comment or an operator (`>`, `&`,
    `;`, `|`), so `xlnet-jax ... >launch.log 2>&1 &` is the command it starts."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if set(word) <= set("();<>|&"):
            break
        words.append(word)
    return words


def documented_commands(text: str) -> list[str]:
    """The `xlnet-jax` commands a markdown page shows, each as one line."""
    commands = []
    blocks = re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    for language, block in blocks:
        if language.strip() == "text":  # trees and usage synopses, not commands
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith(PROGRAM + " "):
                commands.append(shlex.join(_command_words(line)))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    for span in re.findall(rf"`({PROGRAM} [^`]+)`", prose):
        words = span.split()
        if any(p in span for p in PLACEHOLDERS) or not any(w.startswith("-") for w in words):
            continue
        if words[-1].startswith("-") and "=" not in words[-1]:
            continue
        commands.append(shlex.join(shlex.split(span)))
    return commands


def check_parses(argv: list[str]) -> None:
    """Parses `xlnet-jax ARGV` as cli.main does, running nothing; raises on a wrong line."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        return
    name, rest = argv[0], argv[1:]
    if name == "launch":
        _check_launch(rest)
        return
    if name not in cli.COMMANDS:
        raise UsageError(f"unknown command {name!r}")
    if "--help" in rest or "-h" in rest:
        return
    has_config = any(a == "--config" or a.startswith("--config=") for a in rest)
    if not has_config and any(a.startswith("--config.") for a in rest):
        # A rerun reads WORKDIR/config.json (cli._with_run_config); configs/base.py stands in
        # for that saved config, so the overrides are still checked against real fields.
        rest = ["--config", "configs/base.py", *rest]
    fv = reference.command_flags(name, rest)
    with reference._argv([f"{PROGRAM} {name}", *rest]):
        args = cli._parse(fv, name, rest)
    if cli.COMMANDS[name].positional == "SRC":
        cli._single_source(args)
    elif not cli.COMMANDS[name].positional and args:
        raise UsageError(f"{name} takes no positional arguments, got {args}")


def _check_launch(rest: list[str]) -> None:
    """argparse's own checks, then the train or finetune command that `launch train|run`
    passes on."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = pod._parse(rest)
        except SystemExit as e:
            if e.code:
                raise UsageError(stderr.getvalue().strip().splitlines()[-1]) from None
            return  # --help
    if args.command in ("train", "run"):
        check_parses(pod.program_args(args, []))


def _all_commands() -> list[tuple[str, str]]:
    """(page, command) for every command of every page, the generated CLI reference too."""
    pages = {p.relative_to(REPO).as_posix(): p.read_text() for p in PAGES}
    pages["reference/cli.md (generated)"] = reference.cli_page()
    return [(page, c) for page, text in pages.items() for c in documented_commands(text)]


def test_every_documented_command_parses(monkeypatch):
    monkeypatch.chdir(REPO)  # config files are named relative to the repository root
    found = _all_commands()
    assert len(found) >= 40, found  # the extraction still finds the manual's commands
    wrong = []
    for page, command in found:
        try:
            check_parses(shlex.split(command)[1:])
        except (UsageError, flags.Error) as e:
            wrong.append(f"{page}: {command}\n    {e}")
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize(
    "command, error",
    [
        ("xlnet-jax prepare --out c --vocab_sise 100", "vocab_sise"),
        ("xlnet-jax train --config configs/tiny.py --workdir w --config.batch_sise=8", "sise"),
        ("xlnet-jax train --config configs/tiny.py --workdir w --config.batch_size=8x", "8x"),
        ("xlnet-jax export-hf --out hf/", "exactly one SRC"),
        ("xlnet-jax eval --workdir w stray", "positional"),
        ("xlnet-jax launch stop --name x --zone us-east5-a --yes", "--yes"),
        ("xlnet-jax launch train --name x --zone us-east5-a --config configs/tiny.py "
         "--workdir gs://b/r --config.sed=1", "sed"),
        ("xlnet-jax launch run finetune --backend local --config configs/finetune/cpu.py "
         "--workdir w --task-name mnli --data-dir d --init-from s --config.sed=1", "sed"),
        ("xlnet-jax trian --config configs/tiny.py", "trian"),
    ],
)  # fmt: skip
def test_a_wrong_command_is_caught(monkeypatch, command, error):
    """The check fails on a misspelt flag, config field or value, a stray argument."""
    monkeypatch.chdir(REPO)
    with pytest.raises((UsageError, flags.Error), match=re.escape(error)):
        check_parses(shlex.split(command)[1:])


def test_commands_are_found_in_blocks_and_whole_inline_spans():
    page = (
        "Run `xlnet-jax eval --workdir runs/a`, not `xlnet-jax compile --topology` or\n"
        "`xlnet-jax train --dry_run ...`.\n\n"
        "```bash\nxlnet-jax train --config configs/tiny.py \\\n"
        "    --workdir 'runs/b'   # a comment\nls\n```\n\n"
        "```console\n$ xlnet-jax launch status --name n --zone z --dry-run\ngcloud ...\n```\n"
    )
    assert documented_commands(page) == [
        "xlnet-jax train --config configs/tiny.py --workdir runs/b",
        "xlnet-jax launch status --name n --zone z --dry-run",
        "xlnet-jax eval --workdir runs/a",
    ]


def test_the_manual_builds_strict(tmp_path):
    """`mkdocs build --strict` (warnings are errors: a broken link, a page not in the nav)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    cli_page = (tmp_path / "reference" / "cli.html").read_text()
    assert all(f"xlnet-jax {name}" in cli_page for name in [*cli.COMMANDS, "launch run"])
    # Material lets inline code break anywhere: a flag's cell must not ("--tfds_data_di r").
    cells = re.findall(r"<tr>\s*<td>(.*?)</td>", cli_page, flags=re.DOTALL)
    assert len(cells) > 100 and "--tfds_data_dir" in " ".join(cells)
    assert all(c.startswith('<span style="white-space: nowrap"><code>') for c in cells), cells
    assert not unreachable_from_files(tmp_path)


def unreachable_from_files(site: pathlib.Path) -> list[str]:
    """Each relative link of the built site ("page: href") that, opened from disk (file://),
    would not reach a file: a folder shows as a listing there, not as its index.html."""
    broken = []
    for page in site.rglob("*.html"):
        for href in re.findall(r'(?:href|src)="([^"#?]+)', page.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:|/", href):  # https:, mailto:, data:, absolute
                continue
            if not (page.parent / href).is_file():
                broken.append(f"{page.relative_to(site)}: {href}")
    return broken


def test_the_cli_reference_has_every_flag_of_every_command():
    page = reference.cli_page()
    for name in cli.COMMANDS:
        for flag in reference.command_flags(name):
            assert f"`--{flag}`" in page, (name, flag)
    _, subparsers = pod.build_parser()
    for name, sub in subparsers.items():
        assert f"### `xlnet-jax launch {name}`" in page
        for action in sub._actions:
            for option in [] if action.dest == "help" else action.option_strings:
                assert f"`{option}`" in page, (name, option)


def test_the_config_reference_has_every_field_with_its_doc():
    """Every field of default_config() is listed with the doc its declaration gives it."""
    from xlnet_jax.config import default_config

    comments = reference.field_docs()
    assert set(comments) == set(default_config().keys())
    assert all(comment for _, comment in comments.values()), comments
    assert comments["batch_size"] == (
        "Optimisation (AdamW, linear warmup then linear decay)",
        "Global batch (rows per step, all hosts together).",
    )
    assert comments["attention_impl"][1].startswith('Attention: "xla" (reference)')
    page = reference.config_page()
    for field in comments:
        assert f"| `{field}` |" in page, field


def test_the_readme_stays_a_first_visit():
    """At most 200 lines; the rest lives in the manual."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_the_readme_links_into_the_manual_resolve():
    """Each `docs/...` link of README.md names a page, and its #anchor a heading there."""
    from markdown.extensions.toc import slugify

    links = re.findall(r"\]\((docs/[^)#]*)(?:#([^)]*))?\)", (REPO / "README.md").read_text())
    assert len(links) >= 10, links
    for page, anchor in links:
        assert (REPO / page).is_file(), page
        headings = re.findall(r"^#+ (.*)$", (REPO / page).read_text(), flags=re.MULTILINE)
        assert not anchor or anchor in {slugify(h, "-") for h in headings}, (page, anchor)


def test_install_lines_install_the_checkout_with_extras_that_exist():
    """The package is not on PyPI: every `pip install` of it in a page or in a message of the
    package is `pip install -e ".[EXTRA,...]"` from the checkout, naming extras setup.py has
    (`pip install "xlnet-jax[beam]"` failed for a user, issue 38)."""
    import importlib.metadata

    extras = set(importlib.metadata.metadata("xlnet-jax").get_all("Provides-Extra"))
    sources = [*PAGES, *sorted((REPO / "xlnet_jax").rglob("*.py"))]
    by_name, named = [], []
    for path in sources:
        text = path.read_text()
        by_name += [f"{path.name}: {m}" for m in re.findall(r"xlnet-jax\[[^\]]*\]", text)]
        named += re.findall(r"""pip install -e ["']?\.\[([^\]]*)\]""", text)
    assert by_name == []
    assert len(named) >= 5, named
    assert {e for group in named for e in group.split(",")} <= extras, (named, extras)


def test_the_finetune_presets_page_has_every_preset_and_its_values():
    """Every configs/finetune/*.py gets a section, with each value it sets apart from the
    defaults: RACE's batch 32 and clip over 32 cores, STS-B's Adam epsilon."""
    page = reference.finetune_presets_page()
    presets = sorted((REPO / "configs" / "finetune").glob("*.py"))
    sections = re.findall(r"^## `configs/finetune/(\w+)\.py`$", page, flags=re.MULTILINE)
    assert sections == [p.stem for p in presets]
    race = page.split("## `configs/finetune/race.py`")[1].split("## ")[0]
    assert "| `batch_size` | `32` | `32` |" not in race  # only the values that differ
    assert "| `clip_replicas` | `32` | `0` |" in race and "| `seq_len` | `512` | `128` |" in race
    assert "| `adam_eps` | `1e-08` |" in page.split("sts_b.py`")[1]


def test_the_demo_result_is_quoted_as_measured_everywhere():
    """Getting started's Demo result is the one place the demo's figures are measured; the
    README, the Fine-tune page and tiny's docstring quote its final held-out loss."""
    measured = (REPO / "docs" / "getting-started.md").read_text()
    final = float(re.search(r"\((\d\.\d{4}) ± \d\.\d{4} at the end", measured).group(1))
    assert f"/ {final:.2f} nats after 500 / 1000 / 1500 /" in measured
    quoted = {
        "README.md": rf"held-out\s+PLM loss ends at {final:.2f} nats",
        "configs/tiny.py": rf"held-out loss {final:.2f} nats\s+after 2000 steps",
    }
    for path, pattern in quoted.items():
        assert re.search(pattern, (REPO / path).read_text()), (path, pattern)
    for path in ("README.md", "docs/fine-tuning.md", "configs/tiny.py"):
        text = (REPO / path).read_text()
        for loss in re.findall(r"held-out (?:PLM )?loss(?: ends at)? (\d\.\d\d)\b", text):
            assert float(loss) == round(final, 2), (path, loss, final)
