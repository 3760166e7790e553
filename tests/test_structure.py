"""The shape of the house: one train-step recipe, imports flowing one way, one error family."""

import ast
import inspect
import pathlib

from xlnet_jax import errors

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / "xlnet_jax"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """The xlnet_jax modules `path` imports (anywhere in the file, lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
    sources = [*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    sources += (REPO / "tests").glob("*.py")
    places = [
        str(p.relative_to(REPO))
        for p in sources
        if p.name != "test_structure.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "jax.jit"
        and "train_step" in ast.unparse(node.args[0] if node.args else node)
    ]
    assert places == ["xlnet_jax/program.py"]


def test_nothing_but_the_cli_imports_the_training_loop():
    importers = {name for name, deps in _graph().items() if "xlnet_jax.train" in deps}
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
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                if not node.name.startswith("_") and path.name != "errors.py":
                    outside.append(f"{path.relative_to(REPO)}:{node.name}")
    assert outside == [], "define user-facing errors in xlnet_jax/errors.py"
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        assert issubclass(cls, errors.XLNetJaxError)
