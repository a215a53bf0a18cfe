"""`check DIR` holds each genai_config.json to the runtime profile of the release the package was made for.

The release is the one provenance.json records (runtime_profiles.onnxruntime_genai.version): a
package compiled for 0.17.1 is read against the 0.17.1 profile, one for 0.18.0 against 0.18.0's.
The two releases' parsers accept the same keys (profiles/ort_genai_0_17.py), so the routing is
shown with a 0.17.1 profile narrowed as 0.16.0's parser is (it refuses `model.mtp.enabled`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from mtpc.checks import check_package
from mtpc.output.write import write_package
from mtpc.pipeline.driver import build
from mtpc.profiles import ort_genai_0_17

from tests.fixtures.package_files import remanifest

REPO = Path(__file__).resolve().parents[2]


def _compiled(folder: Path, release: str) -> Path:
    text = (REPO / "specs" / "qwen35-tiny-mtp.yaml").read_text(encoding="utf-8")
    assert text.count('version: "0.18.0"') == 1
    folder.mkdir()
    spec = folder / "spec.yaml"
    spec.write_text(text.replace('version: "0.18.0"', f'version: "{release}"'), encoding="utf-8")
    write_package(build(spec).artifacts, folder / "pkg")
    return folder / "pkg"


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("releases")
    return {release: _compiled(root / release, release) for release in ("0.17.1", "0.18.0")}


def _recorded(package: Path) -> str:
    provenance = json.loads((package / "provenance.json").read_text(encoding="utf-8"))
    return provenance["runtime_profiles"]["onnxruntime_genai"]["version"]


def test_packages_for_either_release_are_sound_and_say_which_they_are_for(packages):
    for release, package in packages.items():
        assert _recorded(package) == release
        assert [f.render() for f in check_package(package)] == []


def test_the_same_configs_are_emitted_for_both_releases(packages):
    for name in ("genai_config.json", "mtp/genai_config.json"):
        assert (packages["0.17.1"] / name).read_bytes() == (packages["0.18.0"] / name).read_bytes()


def test_a_package_is_read_against_the_profile_of_its_own_release(packages, monkeypatch):
    keys = dict(ort_genai_0_17.PROFILE.keys)
    keys["model.mtp"] = {k: v for k, v in keys["model.mtp"].items() if k != "enabled"}
    monkeypatch.setattr(ort_genai_0_17, "PROFILE", replace(ort_genai_0_17.PROFILE, keys=keys))
    found = [f.render() for f in check_package(packages["0.17.1"])]
    assert found == ["genai_config.json:/model/mtp/enabled: not accepted by onnxruntime-genai 0.17.1"]
    assert [f.render() for f in check_package(packages["0.18.0"])] == []


def test_a_key_the_schema_refuses_is_reported_once(packages, tmp_path):
    package = tmp_path / "pkg"
    shutil.copytree(packages["0.17.1"], package)
    config = json.loads((package / "genai_config.json").read_text(encoding="utf-8"))
    config["model"]["decoder"]["mtpc_unknown_key"] = 1
    (package / "genai_config.json").write_text(json.dumps(config), encoding="utf-8")
    found = [f for f in check_package(package) if f.pointer == "/model/decoder/mtpc_unknown_key"]
    assert len(found) == 1 and "unknown key 'mtpc_unknown_key'" in found[0].message


def test_a_release_without_a_profile_is_a_finding_at_the_provenance_line(packages, tmp_path):
    package = tmp_path / "pkg"
    shutil.copytree(packages["0.18.0"], package)
    path = package / "provenance.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"version": "0.18.0"', '"version": "0.16.0"'), encoding="utf-8")
    remanifest(package)  # as if written so: what is checked here is the release, not the edit (test_manifest.py)
    found = check_package(package)
    assert [(f.file, f.pointer) for f in found] == [("provenance.json", "/runtime_profiles/onnxruntime_genai/version")]
    assert "onnxruntime-genai 0.16.0, which mtpc has no profile of (it knows 0.17.1, 0.18.0)" in found[0].message
    assert found[0].line is not None
