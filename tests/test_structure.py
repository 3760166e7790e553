"""The shape of the house: one train-step recipe, imports flowing down the layers, one error
family."""

import ast
import functools
import inspect
import pathlib
import re
import subprocess
import sys

import xlnet_jax
from xlnet_jax import errors

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / "xlnet_jax"


@functools.cache
def _parsed(path: pathlib.Path) -> ast.Module:
    """A source file's tree, parsed once for all the tests of this file."""
    return ast.parse(path.read_text())


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """The xlnet_jax modules `path` imports (anywhere in the file, lazy imports included)."""
    found = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("xlnet_jax")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path) & set(modules) - {name} for name, path in modules.items()}


def test_the_train_step_is_jitted_in_one_place():
    """One place per program: pretraining's (training/program.py) and fine-tuning's
    (finetune/program.py); the loops, compile and the benchmarks take the steps from them."""
    sources = [*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    sources += (REPO / "tests").glob("*.py")
    places = [
        str(p.relative_to(REPO))
        for p in sources
        if p.name != "test_structure.py"
        for node in ast.walk(_parsed(p))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "jax.jit"
        and "train_step" in ast.unparse(node.args[0] if node.args else node)
    ]
    assert sorted(places) == ["xlnet_jax/finetune/program.py", "xlnet_jax/training/program.py"]


def _room(module: str) -> str:
    """The top-level package or module of xlnet_jax that `module` lives in."""
    return module.split(".")[1] if "." in module else "xlnet_jax"


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that go up the layer order or sideways to another room of the same layer."""
    layer = {room: depth for depth, rooms in enumerate(xlnet_jax.LAYERS) for room in rooms}
    bad = []
    for name, deps in graph.items():
        for dep in deps:
            here, there = _room(name), _room(dep)
            if here == "xlnet_jax" or there in ("xlnet_jax", here):
                continue
            if layer[there] <= layer[here]:
                bad.append(f"{name} -> {dep}")
    return sorted(bad)


def test_every_room_has_a_layer_and_the_top_level_is_small():
    rooms = {p.stem for p in PACKAGE.iterdir() if p.name not in ("__init__.py", "__pycache__")}
    assert rooms == {room for rooms in xlnet_jax.LAYERS for room in rooms}
    assert len([p for p in PACKAGE.iterdir() if p.name != "__pycache__"]) <= 14


def test_imports_flow_down_the_layers():
    assert _layer_violations(_graph()) == []


def test_an_upward_import_is_caught():
    """A planted import of the training layer from the model layer is reported."""
    graph = _graph()
    graph["xlnet_jax.model.xlnet"] = graph["xlnet_jax.model.xlnet"] | {"xlnet_jax.training.steps"}
    graph["xlnet_jax.run.lease"] = graph["xlnet_jax.run.lease"] | {"xlnet_jax.run.workdir"}
    assert _layer_violations(graph) == ["xlnet_jax.model.xlnet -> xlnet_jax.training.steps"]


def test_every_package_says_what_it_owns_and_may_import():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(_parsed(init)) or ""
        assert "import" in doc.lower(), f"{init.relative_to(REPO)}: say what the package may import"


def _manual_tree(root: str) -> list[pathlib.Path]:
    """The paths the docs/architecture.md tree under `root` names, one per entry line.

    An entry is `├── NAME` or `└── NAME` after 4 columns per level (`│   ` or spaces); its
    path is the names of the entries above it at each level, so a line can be added anywhere.
    """
    page = (REPO / "docs" / "architecture.md").read_text()
    tree = page.split(f"```text\n{root}\n", 1)[1].split("```")[0]
    paths, stack = [], []
    for line in tree.splitlines():
        column = min((line.find(m) for m in ("├── ", "└── ") if m in line), default=-1)
        if column < 0:
            continue  # a description's continuation
        depth, name = column // 4, line[column + 4 :].split()[0]
        stack = [*stack[:depth], name.rstrip("/")]
        paths.append(REPO / root / pathlib.Path(*stack))
    return paths


def test_the_manual_trees_name_what_exists():
    """Every entry of the repository and package trees exists; every room of the package and
    every benchmark script has its entry."""
    named = _manual_tree("./") + _manual_tree("xlnet_jax/")
    assert [str(p.relative_to(REPO)) for p in named if not p.exists()] == []
    rooms = {p for p in PACKAGE.iterdir() if p.name not in ("__init__.py", "__pycache__")}
    assert {p for p in named if p.parent == PACKAGE} == rooms
    scripts = set((REPO / "benchmarks").glob("*.py"))
    missing = sorted(p.name for p in scripts - set(named))
    assert missing == [], "add a line for each to the benchmarks/ tree of docs/architecture.md"


def test_nothing_but_the_cli_imports_the_training_loop():
    importers = {name for name, deps in _graph().items() if "xlnet_jax.training.train" in deps}
    assert importers <= {"xlnet_jax.cli"}


def test_the_import_graph_has_no_circles():
    graph = _graph()
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for dep in sorted(graph[name]):
            assert state.get(dep) != "open", " -> ".join([*path, name, dep])
            if dep not in state:
                visit(dep, [*path, name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_every_error_class_of_the_package_is_one_family():
    """Each exception class defined in xlnet_jax derives from XLNetJaxError (private ones,
    never shown to a user, excepted)."""
    outside = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                if not node.name.startswith("_") and path.name != "errors.py":
                    outside.append(f"{path.relative_to(REPO)}:{node.name}")
    assert outside == [], "define user-facing errors in xlnet_jax/errors.py"
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        assert issubclass(cls, errors.XLNetJaxError)


# A file name in prose: a path of words ending .py or .md, not part of a longer name.
_NAMED_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:py|md))\b")


def test_every_file_a_docstring_names_exists():
    """A docstring that names a file (`meta.py`, `docs/storage.md`, `run/lease.py`) names
    one that exists: a bare name anywhere in the repository, a path from the repository,
    the package, or the docstring's own folder or the one above it."""
    roots = ("xlnet_jax", "configs", "benchmarks", "scripts", "tests", "tests_gpu")
    sources = [p for root in roots for p in (REPO / root).rglob("*.py")]
    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listed, cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = {pathlib.Path(f).name for f in files.split()}
    missing = []
    for path in sources:
        for node in ast.walk(_parsed(path)):
            if not isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            ):
                continue
            for named in _NAMED_FILE.findall(ast.get_docstring(node) or ""):
                if "/" not in named:
                    found = named in names
                else:
                    bases = (REPO, PACKAGE, path.parent, path.parent.parent)
                    found = any((base / named).exists() for base in bases)
                if not found:
                    missing.append(f"{path.relative_to(REPO)}: {named}")
    assert missing == []


def test_a_local_run_imports_no_storage_or_tfds_library():
    """gcsfs (with its HTTP stack) and tfds load only where a gs:// path or an unread corpus
    needs them: every `train`, `eval` and `finetune` process and every test subprocess on
    local files starts about a second sooner."""
    entry = "xlnet_jax.training.train xlnet_jax.training.evaluate xlnet_jax.finetune.train"
    heavy = ("gcsfs", "aiohttp", "requests", "tensorflow_datasets")
    code = (
        "import importlib, sys\n"
        f"for name in {entry.split()!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.strip()
    assert loaded == "[]", loaded


def test_the_supervising_parent_of_a_job_process_imports_no_jax(tmp_path):
    """Each process of a multi-process job runs under a parent that only parses the command
    and watches its child (launch/supervise.py): with our configs and the tests' own, that
    parent loads no jax, flax, optax or orbax, a few CPU-seconds per process."""
    code = (
        "import sys\n"
        "from xlnet_jax import cli\n"
        "from xlnet_jax.launch import supervise\n"
        "heavy = {'jax', 'jaxlib', 'flax', 'optax', 'orbax'}\n"
        "supervise.run = lambda argv, name, process: print(\n"
        "    sorted({m.split('.')[0] for m in sys.modules} & heavy)) or 0\n"
        "for config in sys.argv[1:]:\n"
        "    cli.main(['train', '--config', config, '--workdir', 'run',\n"
        "              '--coordinator_address=127.0.0.1:1', '--num_processes=2',\n"
        "              '--process_id=0'])\n"
    )
    configs = [str(REPO / "tests" / "train_config.py"), str(REPO / "configs" / "tiny.py")]
    loaded = subprocess.run(
        [sys.executable, "-c", code, *configs],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout.split("\n")  # fmt: skip
    assert loaded[:2] == ["[]", "[]"], loaded


def test_one_step_loop_serves_pretraining_and_fine_tuning():
    """Every guarantee of a run lives once, in training/loop.py: the workdir's lock and
    fence, the checkpoint saves, the non-finite monitor and the progress line are made
    nowhere else in the package, and both programs hand the loop a program (loop.run)."""
    owned = ("prepare_workdir(", "Fence.around(", "checkpointer.save(", "NonFiniteMonitor(",
             "ProgressLine(", "jax.transfer_guard(")  # fmt: skip
    found = {
        name: sorted(
            str(path.relative_to(PACKAGE))
            for path in PACKAGE.rglob("*.py")
            if any(
                name in line and not line.lstrip().startswith("def ")
                for line in path.read_text().splitlines()
            )
        )
        for name in owned
    }
    assert found == {name: ["training/loop.py"] for name in owned}
    for program in ("training/train.py", "finetune/train.py"):
        assert "loop.run(" in (PACKAGE / program).read_text(), program
