"""The wheel must carry the schemas and templates and work outside the repository."""

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.clients import onnx_genai

REPO = Path(__file__).resolve().parents[1]


def test_wheel_carries_schemas_and_templates(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
    )
    (wheel,) = tmp_path.glob("mtpc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped_schemas = {p.name for p in (REPO / "schemas").glob("*.json")}
    shipped_templates = {p.name for p in (REPO / "templates").glob("*.j2")}
    assert shipped_schemas and shipped_templates
    for name in shipped_schemas:
        assert f"mtpc/schemas/{name}" in names
    for name in shipped_templates:
        assert f"mtpc/templates/{name}" in names
    assert "mtpc/cli/main.py" in names
    # Every subpackage of compiler/ ships: pyproject.toml lists them one by one.
    for init in (REPO / "compiler").rglob("*/__init__.py"):
        package = init.parent.relative_to(REPO / "compiler").as_posix()
        assert f"mtpc/{package}/__init__.py" in names, package


def test_the_wheel_alone_compiles_every_shipped_spec_from_an_empty_folder(tmp_path):
    """The wheel unpacked on its own (not this checkout), run from a folder with nothing in it."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheel"), str(REPO)],
        check=True,
    )
    (wheel,) = (tmp_path / "wheel").glob("mtpc-*.whl")
    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"}
    where = subprocess.run([sys.executable, "-c", "import mtpc; print(mtpc.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(installed)
    for spec in sorted((REPO / "specs").glob("*.yaml")):
        out = tmp_path / "out" / spec.stem
        run = subprocess.run([sys.executable, "-m", "mtpc", "compile", str(spec), "-o", str(out), "-q"],
                             cwd=empty, env=env, capture_output=True, text=True)
        assert run.returncode == 0, (spec.name, run.stderr)
        assert (out / "README.md").is_file() and any(out.glob("*.onnx")), spec.name
        onnx_genai.check_written(out)  # written by a subprocess, which the in-process hook does not see
    assert list(empty.iterdir()) == []
