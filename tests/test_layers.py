"""The import contract of ../shared/DESIGN.md ("Layers"): each layer imports only the layers
below it (the data flow of the design), every package of metasched has a row here, and no
files of one package import each other in a circle.

Lowering sits below the Schedule API because ``str(schedule)`` shows the lowered program after
every primitive; code generation knows only the loop-program IR."""
import ast
import pathlib

import pytest

import metasched

# Layer -> the layers it may import directly, as DESIGN.md's table says. "X and below" is
# spelled out through BELOW. The last rows are modules DESIGN.md's table does not list yet:
# the built-in workload files, the top-level build() and the hand-written schedules.
_DIRECT = {
    "errors": set(),
    "timing": set(),
    "arrays": set(),
    "ir": {"errors"},
    "lang": {"ir", "arrays"},
    "lower": {"ir", "lang"},
    "schedule": {"lower", "lang", "ir"},
    "codegen": {"ir", "timing", "arrays"},
    "space": {"schedule"},
    "database": {"schedule", "lang"},
    "measure": {"codegen", "schedule"},
    "search": {"space", "database", "schedule"},
    "tune": {"search", "measure", "database", "space", "codegen", "schedule", "workloads", "timing"},
    "graph": {"lang", "ir"},
    "network": {"tune", "graph", "codegen", "measure", "space", "schedule", "database", "lang"},
    "workloads": {"lang"},
    "build": {"codegen", "schedule", "lang", "lower", "database", "tune"},
    "handwritten": {"schedule", "lang", "workloads"},
}
TOP = {"cli", "testing", "__init__", "__main__"}  # may use every layer
NOT_CODE = {"grammar"}  # the grammar files, shipped as package data


def _below(layer: str, seen=None) -> set[str]:
    """``layer``'s direct rows and everything below them ("schedule and below")."""
    seen = set() if seen is None else seen
    for other in _DIRECT[layer]:
        if other not in seen:
            seen.add(other)
            _below(other, seen)
    return seen | {"errors"}


ALLOWED = {layer: _below(layer) for layer in _DIRECT}
PACKAGE = pathlib.Path(metasched.__file__).parent


def _imports(path: pathlib.Path) -> list[str]:
    """Every module ``path`` imports (``from a.b import c`` gives ``a.b.c`` where ``c`` is a
    module of the package, else ``a.b``), at any depth: a function-level import counts, one
    under ``if TYPE_CHECKING:`` (for annotations only, never run) does not."""
    found = []
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block)
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.append(candidate if _module_path(candidate) else node.module)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
    return [name for name in found if name.split(".")[0] == "metasched"]


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _module_path(name: str):
    parts = name.split(".")[1:]
    base = PACKAGE.joinpath(*parts) if parts else PACKAGE
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _layer(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _python_files():
    return [p for p in PACKAGE.rglob("*.py") if _layer(p) not in NOT_CODE]


def test_every_package_has_a_row():
    unknown = sorted({_layer(p) for p in _python_files()} - set(ALLOWED) - TOP)
    assert not unknown, (f"metasched.{', metasched.'.join(unknown)} has no row in the layer table: add it to "
                         f"DESIGN.md's \"Layers\" and to tests/test_layers.py in the change that creates it")


def test_layers_import_only_what_lies_below_them():
    bad = []
    for path in _python_files():
        layer = _layer(path)
        if layer in TOP or layer not in ALLOWED:
            continue
        for name in _imports(path):
            other = name.split(".")[1] if "." in name else "__init__"
            if other != layer and other not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("metasched",) + parts)


def _cycle(graph: dict[str, set[str]]):
    """One cycle of ``graph`` as a list of nodes, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.parametrize("package", sorted({_layer(p) for p in PACKAGE.glob("*/__init__.py")} - NOT_CODE))
def test_no_import_cycle_inside_a_package(package):
    files = [p for p in _python_files() if _layer(p) == package]
    names = {_module_name(p) for p in files}
    graph = {_module_name(p): {m for m in _imports(p) if m in names and m != _module_name(p)} for p in files}
    # A package's __init__ imports its modules to re-export them; a module importing a name
    # back from its own package's __init__ closes a circle, and that is what this finds.
    cycle = _cycle(graph)
    assert cycle is None, "modules of metasched." + package + " import each other in a circle: " + " -> ".join(cycle)


def test_the_checks_catch_what_they_should(tmp_path):
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert "space" in ALLOWED["search"] and "lower" in ALLOWED["space"] and "codegen" not in ALLOWED["space"]
    assert "measure" not in ALLOWED["search"] and "codegen" in ALLOWED["tune"]


def test_no_relative_imports_hide_from_the_contract():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.ImportFrom) and node.level), f"{path}: use absolute imports"
