"""`mtpc check` holds a windowed main graph to onnxruntime-genai's contract, and each broken form is refused.

Each edit is one onnxruntime-genai's `RecurrentState` refuses at load or mishandles: a conv state
windowed while the recurrent one is not, two windows, a dynamic dim besides batch, a present shaped
unlike its past, and more drafts than the window holds (the runtime would silently draft fewer).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

from mtpc.checks import check_package
from mtpc.output.write import write_package
from mtpc.pipeline.driver import build

from tests.fixtures.package_files import remanifest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("windowed") / "pkg"
    write_package(build(REPO / "specs" / "qwen35-tiny-mtp.yaml").artifacts, folder)
    return folder


def _edit_graph(package: Path, edit) -> None:
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    edit({v.name: v for v in (*model.graph.input, *model.graph.output)})
    onnx.save(model, str(package / "model.onnx"))


def _dims(value):
    return value.type.tensor_type.shape.dim


def _drop_window(tensors):
    for name in ("past.0.recurrent", "present.0.recurrent"):
        del _dims(tensors[name])[0]


def _other_window(tensors):
    for name in ("past.2.conv", "present.2.conv", "past.2.recurrent", "present.2.recurrent"):
        _dims(tensors[name])[0].dim_value = 3


def _dynamic_channels(tensors):
    for name in ("past.0.conv", "present.0.conv"):
        _dims(tensors[name])[2].dim_param = "channels"


def _present_unlike_past(tensors):
    _dims(tensors["present.2.conv"])[3].dim_value = 4


def _more_drafts(package: Path) -> None:
    config = json.loads((package / "genai_config.json").read_text())
    config["speculative"]["max_draft_tokens"] = 5
    (package / "genai_config.json").write_text(json.dumps(config, indent=1))


EDITS = {
    "recurrent state unwindowed": (lambda p: _edit_graph(p, _drop_window),
                                   "'past.0.conv' in model.onnx is windowed and 'past.0.recurrent' is not"),
    "two windows": (lambda p: _edit_graph(p, _other_window), "the state windows of model.onnx differ"),
    "a dynamic dim besides batch": (lambda p: _edit_graph(p, _dynamic_channels),
                                    "'past.0.conv' in model.onnx has the dynamic dim 'channels' at axis 2"),
    "present unlike past": (lambda p: _edit_graph(p, _present_unlike_past),
                            "'present.2.conv' in model.onnx is [5, 'batch_size', 128, 4] but its past"),
    "more drafts than the window": (_more_drafts, "genai_config.json:/speculative/max_draft_tokens: is 5 but the "
                                                  "state window of model.onnx holds 5 tokens"),
}


def test_the_compiled_windowed_package_passes(compiled):
    assert [f.render() for f in check_package(compiled)] == []
    model = onnx.load(str(compiled / "model.onnx"), load_external_data=False)
    shapes = {v.name: [d.dim_value or d.dim_param for d in _dims(v)] for v in model.graph.input}
    assert shapes["past.0.conv"] == [5, "batch_size", 128, 3] and shapes["past.0.recurrent"] == [5, "batch_size", 4, 16, 16]


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_each_broken_window_is_a_finding(compiled, tmp_path, edit):
    apply, says = EDITS[edit]
    package = shutil.copytree(compiled, tmp_path / "pkg")
    apply(package)
    remanifest(package)
    found = [f.render() for f in check_package(package)]
    assert any(says in line for line in found), found
