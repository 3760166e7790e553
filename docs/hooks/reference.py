"""MkDocs hook: the reference pages, generated at build time from the code they describe.

`reference/cli.md` lists every flag of every `xlnet-jax` command as its parser defines it
(absl flags in `xlnet_jax/cli.py`, argparse in `xlnet_jax/launch/pod.py`), and
`reference/config.md` every config field with the doc its declaration in
`xlnet_jax/config/fields.py` gives it and the value each preset in `configs/` gives it.
Neither page exists in `docs/`: each fact has one source, the code.
"""

import argparse
import contextlib
import importlib.util
import pathlib
import sys
from collections.abc import Iterator

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the checkout being built, not whichever copy is installed
    sys.path.insert(0, str(REPO))

from absl import flags  # noqa: E402

from xlnet_jax import cli  # noqa: E402
from xlnet_jax import config as xlnet_config  # noqa: E402
from xlnet_jax.launch import pod  # noqa: E402

PRESETS = ("tiny", "small", "base", "large")
PAGES = {
    "reference/cli.md": lambda: cli_page(),
    "reference/config.md": lambda: config_page(),
    "reference/finetune-presets.md": lambda: finetune_presets_page(),
}


def _cell(text: object) -> str:
    """`text` as one markdown table cell of prose: one line, no raw HTML (`<sep>` shows)."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: object) -> str:
    """`value` as inline code in a table cell (code spans show `<` as it is)."""
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return "`" + " ".join(text.split()).replace("|", "\\|") + "`"


def _flag_cell(text: str) -> str:
    """A table cell of flag names that a narrow page never breaks inside a name: Material's
    theme lets inline code break anywhere (`word-break: break-word`), and the table showed
    "--tfds_data_di r". The backticks inside still make code spans."""
    return f'<span style="white-space: nowrap">{text}</span>'


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """sys.argv set to `argv`: config_flags defines the --config.FIELD overrides it finds
    there when --config is defined, so a command's flags depend on the command line."""
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def command_flags(name: str, argv: list[str] | None = None) -> flags.FlagValues:
    """The absl flags of `xlnet-jax NAME`, defined as `cli.main` defines them for `argv`."""
    fv = flags.FlagValues()
    with _argv([f"xlnet-jax {name}", *(argv or [])]):
        cli.COMMANDS[name].define(fv)
    return fv


def _absl_section(name: str) -> list[str]:
    command = cli.COMMANDS[name]
    fv = command_flags(name)
    lines = [f"## `xlnet-jax {name}`", "", command.summary, ""]
    usage = f"xlnet-jax {name} {command.positional} [flags]".replace("  ", " ")
    lines += ["```text", usage, "```", "", "| flag | default | what |", "|---|---|---|"]
    for flag in sorted({fv[n] for n in fv}, key=lambda f: f.name):
        if flag.boolean:  # a switch, as in launch's tables
            default = "on" if flag.default else "off"
        else:
            default = "(none)" if flag.default is None else _code(flag.default)
        lines.append(f"| {_flag_cell(f'`--{flag.name}`')} | {default} | {_cell(flag.help)} |")
    return [*lines, ""]


def _argparse_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| flag | default | what |", "|---|---|---|"]
    for action in parser._actions:  # argparse's own help formatter reads the same list
        if isinstance(action, argparse._HelpAction):
            continue
        flag = ", ".join(f"`{s}`" for s in action.option_strings)
        if not action.option_strings:  # a positional: its name, as the usage line shows it
            flag = f"`{action.metavar or action.dest}`"
        elif action.metavar and action.nargs != 0:
            flag += f" `{action.metavar}`"
        if action.required:
            default = "required"
        elif action.nargs == 0:  # a switch
            default = "on" if action.default else "off"
        elif action.default is None:
            default = "(none)"
        else:
            default = _code(action.default)
        what = (action.help or "") % dict(vars(action), prog=parser.prog)  # as argparse expands
        rows.append(f"| {_flag_cell(flag)} | {default} | {_cell(what)} |")
    return rows


def _launch_section() -> list[str]:
    parser, subparsers = pod.build_parser()
    lines = ["## `xlnet-jax launch`", "", parser.description, ""]
    lines += ["```bash", pod.EXAMPLES.rstrip(), "```", ""]
    for name, sub in subparsers.items():
        summary = sub.description.split("\n\n", 1)
        lines += [f"### `xlnet-jax launch {name}`", "", _cell(summary[0]), ""]
        if len(summary) > 1:
            lines += [_cell(summary[1]), ""]
        lines += [*_argparse_rows(sub), ""]
    return lines


def cli_page() -> str:
    about = cli.__doc__.split("\n\n", 1)[1]  # flags, errors and exit codes, as cli.py says
    lines = [
        "# Command line",
        "",
        "Generated from the argument parsers at build time (`docs/hooks/reference.py`). "
        "Config fields are set with `--config.FIELD=VALUE`: see [Config fields](config.md).",
        "",
        " ".join(about.split()),
        "",
    ]
    for name in cli.COMMANDS:
        lines += _absl_section(name)
    return "\n".join(lines + _launch_section()) + "\n"


def field_docs() -> dict[str, tuple[str, str]]:
    """Each config field, part by part: (its part's title, its one-line doc), read off the
    declaration table `xlnet_jax/config/fields.py`."""
    return {
        field.name: (title, field.doc)
        for part, title in xlnet_config.PARTS.items()
        for field in xlnet_config.FIELDS
        if field.part == part
    }


def _preset(name: str):
    """configs/NAME.py's config (NAME may be finetune/TASK)."""
    spec = importlib.util.spec_from_file_location(
        f"preset_{name.replace('/', '_')}", REPO / "configs" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def config_page() -> str:
    defaults = xlnet_config.default_config()
    presets = {name: _preset(name) for name in PRESETS}
    lines = [
        "# Config fields",
        "",
        "Generated at build time (`docs/hooks/reference.py`) from the declaration of every "
        "field in `xlnet_jax/config/fields.py`: its doc, its default, and the value each "
        "preset in `configs/` gives it where that differs. Override any field with "
        "`--config.FIELD=VALUE`; the whole config is checked with the corpus before anything "
        "compiles (`xlnet-jax train --dry_run`).",
    ]
    section = None
    for field, (where, comment) in field_docs().items():
        if where != section:
            section = where
            lines += ["", f"## {where}", "", "| field | default | presets | what |"]
            lines.append("|---|---|---|---|")
        default = defaults[field]
        differ = [
            f"{name} {_code(preset[field])}"
            for name, preset in presets.items()
            if preset[field] != default
        ]
        row = [f"`{field}`", _code(default), ", ".join(differ), _cell(comment)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def finetune_presets_page() -> str:
    """Every fine-tuning preset's values where they differ from `finetune_config()`'s
    defaults, read off the preset files themselves (the Fine-tune page says where each
    value comes from)."""
    from xlnet_jax.finetune.config import finetune_config

    defaults = finetune_config()
    names = sorted(p.stem for p in (REPO / "configs" / "finetune").glob("*.py"))
    lines = [
        "# Fine-tuning presets",
        "",
        "Generated at build time (`docs/hooks/reference.py`) from `configs/finetune/*.py`: each "
        "preset's fields that differ from the fine-tuning defaults (`finetune_config()` in "
        "`xlnet_jax/finetune/config.py`), with those defaults last. Intervals written as a "
        "fraction of `num_train_steps` in the preset follow a shortened "
        "`--config.num_train_steps`.",
    ]
    for name in names:
        preset = _preset(f"finetune/{name}")
        lines += ["", f"## `configs/finetune/{name}.py`", "", "| field | value | default |"]
        lines.append("|---|---|---|")
        for field in sorted(preset.keys()):
            if field not in defaults or preset[field] != defaults[field]:
                default = _code(defaults[field]) if field in defaults else "(none)"
                lines.append(f"| `{field}` | {_code(preset[field])} | {default} |")
    return "\n".join(lines) + "\n"


def on_files(files, config):
    """Adds the generated pages to the site's files, before the nav is built."""
    from mkdocs.structure.files import File

    for uri, page in PAGES.items():
        files.append(File.generated(config, uri, content=page()))
    return files
