"""`mtpc check` on a compiled package with one file missing, cut short or edited: exit 1, the file named, its line.

The package is the shipped tiny spec compiled once; each case copies it and breaks one
thing, as a user's copy or a careless edit would. Line numbers are found in the file's
text by plain search, independently of the checker's own position index. Such a copy also
fails against its manifest.json (tests/checks/test_manifest.py); where a case is about what
another check says, the manifest is rewritten to match (`remanifest`), as if compile had
written the package that way.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mtpc.checks.positions import locate, positions
from mtpc.cli.main import main
from mtpc.pipeline.driver import build
from mtpc.output.write import write_package

from tests.fixtures.package_files import remanifest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "pkg"
    with build(REPO / "specs" / "qwen35-tiny-mtp.yaml") as built:
        write_package(built.artifacts, out)
    return out


@pytest.fixture
def copy(package, tmp_path):
    def make(name="pkg") -> Path:
        dest = tmp_path / name
        shutil.copytree(package, dest)
        return dest

    return make


def check(capsys, *argv) -> tuple[int, list[str], str]:
    code = main(["check", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def line_of(path: Path, text: str) -> int:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} is not in {path}")


def test_the_compiled_package_is_complete(package, capsys):
    code, out, err = check(capsys, package)
    assert (code, out) == (0, []), out
    assert "ok (1 target)" in err


# Each file a runtime needs, and the words that say who needs it.
REQUIRED = [
    ("genai_config.json", "is missing: mtp/genai_config.json is a head folder's config"),
    ("mtp/genai_config.json", "is missing: genai_config.json's model.mtp names the head 'mtp/mtp.onnx'"),
    ("inference_metadata.yaml", "is missing: config.json declares an MTP sidecar (speculator_config), and onnx-genai loads"),
    ("config.json", "is missing: mtp_sidecar/mtp_sidecar.onnx is onnx-genai's MTP head, and onnx-genai reads its declaration only"),
    ("model.onnx", "'model.onnx' does not exist in the package"),
    # Without its own unwindowed main graph, onnx-genai takes model.onnx, whose state it cannot zero-fill.
    ("decoder.onnx", "'past.0.conv' in model.onnx has the symbolic dim 'batch_size' at axis 1: onnx-genai zero-fills"),
    ("mtp/mtp.onnx", "'mtp/mtp.onnx' does not exist in the package"),
    ("mtp_sidecar/mtp_sidecar.onnx", "'mtp_sidecar/mtp_sidecar.onnx' does not exist in the package"),
    ("model.onnx.data", "'model.onnx.data' does not exist in the package"),
    ("mtp/mtp.onnx.data", "'mtp.onnx.data' does not exist in the package"),
    ("mtp_sidecar/mtp_sidecar.onnx.data", "'mtp_sidecar.onnx.data' does not exist in the package"),
]


@pytest.mark.parametrize("missing, says", REQUIRED, ids=[m for m, _ in REQUIRED])
def test_each_required_file_missing_fails_the_check_and_names_the_file(copy, capsys, missing, says):
    pkg = copy()
    (pkg / missing).unlink()
    code, out, err = check(capsys, pkg)
    assert code == 1, out
    assert any(says in line for line in out), out
    assert "finding" in err and "ok" not in err


def test_a_missing_tokenizer_is_a_warning_that_names_the_file(copy, capsys):
    """og.Tokenizer needs both files; the package still runs on token ids (a source without a tokenizer builds one)."""
    pkg = copy()
    (pkg / "tokenizer_config.json").unlink()
    remanifest(pkg)  # written without it (else its manifest.json would miss it: an error)
    code, out, err = check(capsys, pkg)
    assert code == 0
    assert out == [
        f"{pkg}/tokenizer_config.json:/: warning: is missing: og.Tokenizer reads tokenizer.json and tokenizer_config.json "
        "together (the package has tokenizer.json); token ids still work"
    ]
    assert "ok (1 target; 1 warning)" in err
    code, out, _ = check(capsys, "--format", "github", pkg)
    assert code == 0 and len(out) == 1 and out[0].startswith(f"::warning file={pkg}/tokenizer_config.json,title=mtpc check::")


def test_no_tokenizer_at_all_is_a_warning_with_a_hint_for_onnxruntime_genai_and_an_error_for_onnx_genai(copy, capsys):
    pkg = copy()
    (pkg / "tokenizer_config.json").unlink()
    (pkg / "tokenizer.json").unlink()
    remanifest(pkg)
    code, out, _ = check(capsys, "--format", "github", pkg)
    assert code == 1 and len(out) == 2, out
    warning, error = sorted(out, key=lambda line: not line.startswith("::warning"))
    assert warning.startswith(f"::warning file={pkg}/tokenizer.json,title=mtpc check::/: is missing, with every other tokenizer file")
    assert "%0Ahint: compile from a source that ships tokenizer.json and tokenizer_config.json" in warning
    # onnx-genai's Engine::from_dir (ModelDirectory::load_flat) refuses a folder without tokenizer.json.
    assert error.startswith(f"::error file={pkg}/tokenizer.json,title=mtpc check::/: is missing: onnx-genai's Engine::from_dir refuses")


def test_truncated_external_data_names_the_data_file(copy, capsys):
    pkg = copy()
    data = pkg / "mtp_sidecar" / "mtp_sidecar.onnx.data"
    size = data.stat().st_size
    os.truncate(data, size - 1)
    code, out, _ = check(capsys, pkg)
    assert code == 1
    assert len(out) == 2 and out[1].startswith(f"{pkg}/mtp_sidecar/mtp_sidecar.onnx.data:/: mtp_sidecar/mtp_sidecar.onnx initializer ")
    assert f"the file has {size - 1} bytes (truncated?)" in out[1]
    assert out[0] == (f"{pkg}/mtp_sidecar/mtp_sidecar.onnx.data:/: has {size - 1} bytes, manifest.json records {size}: "
                      "truncated or changed since it was written")


def test_a_graph_no_config_names_has_its_external_data_checked_too(copy, capsys):
    pkg = copy()
    shutil.copy(pkg / "mtp_sidecar" / "mtp_sidecar.onnx", pkg / "mtp_sidecar" / "spare.onnx")  # reads mtp_sidecar.onnx.data
    os.truncate(pkg / "mtp_sidecar" / "mtp_sidecar.onnx.data", 10)
    code, out, _ = check(capsys, pkg)
    assert code == 1
    assert any(line.startswith(f"{pkg}/mtp_sidecar/mtp_sidecar.onnx.data:/: mtp_sidecar/spare.onnx initializer ") for line in out), out


def test_a_bad_key_in_genai_config_is_located_to_its_line_with_a_did_you_mean(copy, capsys, monkeypatch):
    pkg = copy()
    config = pkg / "genai_config.json"
    doc = json.loads(config.read_text(encoding="utf-8"))
    doc["model"]["decoder"]["num_hiden_layers"] = doc["model"]["decoder"]["num_hidden_layers"]
    config.write_text(json.dumps(doc, indent=4), encoding="utf-8")
    remanifest(pkg)
    line = line_of(config, '"num_hiden_layers"')
    col = config.read_text(encoding="utf-8").splitlines()[line - 1].index('"num_hiden_layers"') + 1
    monkeypatch.chdir(pkg.parent)  # GitHub annotations name files relative to the working directory (the checkout)
    code, out, _ = check(capsys, "--format", "github", pkg)
    assert code == 1
    assert out == [
        f"::error file=pkg/genai_config.json,line={line},col={col},title=mtpc check::/model/decoder/num_hiden_layers: "
        "unknown key 'num_hiden_layers' (schema genai_config.schema.json)%0Ahint: did you mean 'num_hidden_layers'?"
    ]
    code, out, _ = check(capsys, pkg)  # text keeps the path as given
    assert out == [
        f"{pkg}/genai_config.json:{line}:{col}: /model/decoder/num_hiden_layers: unknown key 'num_hiden_layers' "
        "(schema genai_config.schema.json)",
        "     = hint: did you mean 'num_hidden_layers'?",
    ]


def test_a_json_parse_error_carries_its_line(copy, capsys):
    pkg = copy()
    config = pkg / "mtp" / "genai_config.json"
    lines = config.read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4] + ","  # a trailing comma at the end of line 5 breaks line 5 or 6
    config.write_text("\n".join(lines), encoding="utf-8")
    code, out, _ = check(capsys, "--format", "github", pkg)
    assert code == 1
    (annotation,) = [a for a in out if "mtp/genai_config.json" in a and "manifest.json" not in a]
    assert "cannot be parsed" in annotation
    assert f"file={pkg}/mtp/genai_config.json,line=" in annotation
    line = int(annotation.split(",line=")[1].split(",")[0])
    assert line in (5, 6)


def test_a_yaml_finding_carries_the_line_of_its_key(copy, capsys):
    pkg = copy()
    metadata = pkg / "inference_metadata.yaml"
    text = metadata.read_text(encoding="utf-8").replace("position_ids_input: position_ids", "position_ids_input: position_id")
    metadata.write_text(text, encoding="utf-8")
    code, out, _ = check(capsys, pkg)
    assert code == 1
    line = line_of(metadata, "position_ids_input: position_id")
    assert any(
        o.startswith(f"{metadata}:{line}:") and "/model/io/position_ids_input: 'position_id' is not an input of decoder.onnx" in o
        for o in out
    ), out


def test_a_yaml_parse_error_carries_its_line(copy, capsys):
    pkg = copy()
    metadata = pkg / "inference_metadata.yaml"
    lines = metadata.read_text(encoding="utf-8").splitlines()
    lines[9] = "  bad: [unclosed"
    metadata.write_text("\n".join(lines), encoding="utf-8")
    code, out, _ = check(capsys, "--format", "json", pkg)
    assert code == 1
    found = [f for t in json.loads("\n".join(out))["targets"] for f in t["findings"] if f["file"].endswith("inference_metadata.yaml")]
    assert found and "cannot be parsed" in found[0]["message"] and found[0]["line"] >= 10


def test_positions_point_at_keys_and_items_of_json_text():
    text = '{\n  "a": {"b": [1,\n    {"c": "\\ud83d\\ude00"}]},\n  "d": null\n}'
    found = positions("x.json", text)
    assert found["/a"] == (2, 3) and found["/a/b"] == (2, 9) and found["/a/b/1"] == (3, 5)
    assert found["/a/b/1/c"] == (3, 6) and found["/d"] == (4, 3)
    assert locate(found, "/a/b/1/missing") == (3, 5)
    assert positions("x.json", '{"a": 1,}') == {}  # unreadable text: no positions, not a crash
