"""The import contract: each layer imports only the layers below it (the data flow of the
design). Lowering sits below the Schedule API because ``str(schedule)`` shows the lowered
program after every primitive; code generation knows only the loop-program IR."""
import ast
import pathlib

import metasched

ALLOWED = {
    "errors": set(),
    "timing": set(),
    "ir": {"errors"},
    "lang": {"errors", "ir"},
    "workloads": {"errors", "ir", "lang"},
    "lower": {"errors", "ir", "lang"},
    "schedule": {"errors", "ir", "lang", "lower"},
    "codegen": {"errors", "ir", "timing"},
}
PACKAGE = pathlib.Path(metasched.__file__).parent


def imported_layers(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "metasched" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_layers_import_only_what_lies_below_them():
    bad = []
    for path in PACKAGE.rglob("*.py"):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer not in ALLOWED:
            continue  # the top: build, cli, testing, handwritten may use every layer
        for other in imported_layers(path) - ALLOWED[layer] - {layer}:
            bad.append(f"{path.relative_to(PACKAGE)} imports metasched.{other}")
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)


def test_no_relative_imports_hide_from_the_contract():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.ImportFrom) and node.level), f"{path}: use absolute imports"
