"""No Python module of the repository reaches itself through its imports: `compiler/` (as `mtpc`), `bench/`,
and any other folder of code, every import counted (lazy ones inside functions too). `tests/` is left out: a test
may import the module it tests and a helper of its own. `compiler/`'s layer order is tests/test_import_layers.py's.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from tests.test_import_layers import cycles

REPO = Path(__file__).resolve().parents[1]
SKIPPED = {"tests", "build", "dist", "node_modules"}  # tests/ by design; the others are made, not written


def module_names(root: Path) -> dict[str, Path]:
    """Every module of the repository at `root` outside tests/ -> its file; `compiler/` is installed as `mtpc`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[0] in SKIPPED or any(part.startswith(".") or part.endswith(".egg-info") for part in parts):
            continue
        if parts[0] == "compiler":
            parts[0] = "mtpc"
        if parts[-1] == "__init__":
            parts.pop()
        if parts:
            found[".".join(parts)] = path
    return found


def repository_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the repository's modules it imports (absolute and relative, at any depth of the file)."""
    paths = module_names(root)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:  # `from . import x` imports the module x when there is one
                    targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in paths else module)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def test_the_graph_sees_every_folder_of_code():
    names = module_names(REPO)
    assert {"mtpc.cli.main", "bench.mtp_speedup", "bench.llama_mtp"} <= set(names)
    assert not any(name.startswith("tests") for name in names)


def test_no_import_cycle_in_the_repository():
    assert cycles(repository_graph(REPO)) == []


def test_a_planted_cycle_is_caught(tmp_path):
    """On a copy of the code with bench/decode_runs.py importing bench/mtp_speedup.py back (the loop that
    bench/llama_mtp.py and mtp_speedup.py once made), the test above would fail, naming both modules."""
    for folder in ("compiler", "bench"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shared = tmp_path / "bench" / "decode_runs.py"
    shared.write_text(shared.read_text(encoding="utf-8") + "\n\ndef _late():\n    from bench import mtp_speedup  # noqa: F401\n")
    found = cycles(repository_graph(tmp_path))
    # One strongly connected component: mtp_speedup reaches decode_runs directly and through llama_mtp.
    assert found == [["bench.decode_runs", "bench.llama_mtp", "bench.mtp_speedup"]]
