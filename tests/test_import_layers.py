"""The layers of `compiler/` as docs/architecture.md orders them, held against the real imports.

A package may import only packages above it in the architecture page's table (lower layers), and no
module may reach itself through imports: every import counts, the ones inside functions and under
`TYPE_CHECKING` included, since a lazy import is still a dependency. The order is written once, in
the page's table; this test reads it from there.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPILER = REPO / "compiler"
ARCHITECTURE = REPO / "docs" / "architecture.md"
# Data packages (JSON Schemas, Jinja2 templates) hold no code: any layer may read them.
DATA = {"schemas", "templates"}


def layer_order(page: Path = ARCHITECTURE) -> list[str]:
    """The packages of the page's layer table, lowest first: rows like "| 3 | `ir/` | ... |"."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`([a-z_]+)/`", page.read_text(), re.M)
    assert rows, f"{page} has no layer table"
    numbers = [int(n) for n, _ in rows]
    assert numbers == list(range(1, len(rows) + 1)), "the layer table is numbered 1, 2, 3, ... in order"
    return [name for _, name in rows]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["mtpc", *parts])


def import_graph(root: Path) -> dict[str, set[str]]:
    """Every module of the tree under `root` (as `mtpc.*`) -> the mtpc modules it imports."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == "mtpc":
                    module = node.module
                else:
                    continue
                for alias in node.names:  # `from . import x` imports the module x when there is one
                    if module == "mtpc" and alias.name in DATA:
                        continue
                    targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in paths else module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.split(".")[0] == "mtpc"}
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mtpc"


def back_imports(graph: dict[str, set[str]], order: list[str]) -> list[str]:
    # The root package re-exports the API (between `api` and `cli`); `python -m mtpc` runs the CLI.
    rank = {name: i for i, name in enumerate(order)}
    rank["mtpc"] = rank["api"] + 0.5
    rank["__main__"] = len(order)
    rank_of = lambda m: rank.get(layer_of(m), -1)  # noqa: E731
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = layer_of(source), layer_of(target)
            if a == b or b in DATA:
                continue
            if rank_of(target) >= rank_of(source):
                found.append(f"{source} imports {target}: `{b}` is not below `{a}`")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer():
    order = layer_order()
    packages = {p.parent.name for p in COMPILER.glob("*/__init__.py")} - DATA
    assert packages - set(order) == set(), "add the new package to docs/architecture.md's layer table"
    assert set(order) - packages == set(), "the layer table names a package compiler/ does not have"


def test_no_import_runs_back_up_a_layer():
    assert back_imports(import_graph(COMPILER), layer_order()) == []


def test_no_import_cycles():
    assert cycles(import_graph(COMPILER)) == []


def test_a_deliberate_back_import_is_caught(tmp_path):
    """The checks on a copy of compiler/ with one import added that runs up the layers and closes a cycle."""
    copy = tmp_path / "compiler"
    shutil.copytree(COMPILER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    diagnostics = copy / "util" / "diagnostics.py"
    diagnostics.write_text(diagnostics.read_text() + "\n\ndef _late():\n    from ..cli import main  # noqa: F401\n")
    graph = import_graph(copy)
    found = back_imports(graph, layer_order())
    assert found == ["mtpc.util.diagnostics imports mtpc.cli.main: `cli` is not below `util`"]
    assert any("mtpc.util.diagnostics" in c and "mtpc.cli.main" in c for c in cycles(graph))


def test_no_package_shadows_a_name_of_the_api():
    """`mtpc.diff(...)` is the API's function: a subpackage `mtpc/diff/` would replace it once imported."""
    import mtpc

    packages = {p.parent.name for p in COMPILER.glob("*/__init__.py")}
    assert packages & set(mtpc.__all__) == set()


def test_no_module_is_past_the_size_where_it_is_split():
    """House style: a module past ~400 lines is split by responsibility in the change that grows it."""
    long = {str(p.relative_to(COMPILER)): n for p in COMPILER.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
