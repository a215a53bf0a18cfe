"""The wheel must carry the schemas and templates and work outside the repository."""

import subprocess
import sys
import zipfile
from pathlib import Path

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

