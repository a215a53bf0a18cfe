"""deepseek2 GGUFs compiled: the two kv_b forms give the same package, and a nextn-less file a text-only one.

The split form is llama.cpp's converter's own f32 file; the legacy form is that file rewritten as converters
before the split wrote it (`test_deepseek2_gguf._legacy`: one `attn_kv_b`, per-head key / value lengths, no *_mla
keys). Both packages must hold the same graphs and the same initializers, value for value, and decode alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec

from .test_deepseek2_gguf import _legacy
from .test_deepseek2_gguf_routing import nextn_less

PROMPT = [45, 12, 77, 30, 61, 8]


def _compile(workdir: Path, name: str, gguf: Path) -> Path:
    spec = write_spec(workdir / f"{name}.yaml", name, f"{{gguf: {gguf.name}}}")
    return compile_spec(spec, workdir / f"pkg-{name}")


def _graph(path: Path) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    model = onnx.load(str(path), load_external_data=True)
    values = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for i in model.graph.initializer:
        i.ClearField("raw_data")
        del i.external_data[:]
    return model.graph, values


@pytest.fixture(scope="module")
def packages(ds_workdir, ds_ggufs) -> dict[str, Path]:
    files = {"split": ds_ggufs["f32"], "legacy": _legacy(ds_ggufs["f32"], ds_workdir / "ds-legacy-pkg.gguf"),
             "text": nextn_less(ds_ggufs, ds_workdir / "ds-text-pkg.gguf")}
    return {kind: _compile(ds_workdir, f"ds-{kind}", path) for kind, path in files.items()}


def _assert_same_graph(a: Path, b: Path, *, nodes: bool = True) -> None:
    (graph_a, values_a), (graph_b, values_b) = _graph(a), _graph(b)
    assert graph_a == graph_b or not nodes
    assert sorted(values_a) == sorted(values_b)
    for name, value in values_a.items():
        np.testing.assert_array_equal(values_b[name], value, err_msg=name)


@pytest.mark.parametrize("graph", ["model.onnx", "mtp/mtp.onnx"])
def test_the_legacy_kv_b_form_compiles_to_the_split_forms_package(packages, graph):
    _assert_same_graph(packages["split"] / graph, packages["legacy"] / graph)


def test_both_kv_b_forms_decode_alike_and_mtp_equals_greedy(packages):
    tokens = {}
    for kind in ("split", "legacy"):
        main, head = decoding.load(packages[kind]), decoding.load(packages[kind] / "mtp")
        tokens[kind] = decoding.greedy(main, PROMPT, STEPS)
        assert decoding.speculative(main, head, PROMPT, STEPS, 2).tokens == tokens[kind], kind
    assert tokens["split"] == tokens["legacy"]


def test_a_nextn_less_gguf_compiles_text_only_with_the_same_trunk(packages):
    text = packages["text"]
    assert not (text / "mtp").exists()
    assert "mtp" not in json.loads((text / "genai_config.json").read_text())["model"]
    # the same weights; the graph differs by the hidden-state output only a head reads
    _assert_same_graph(text / "model.onnx", packages["split"] / "model.onnx", nodes=False)
    assert decoding.greedy(decoding.load(text), PROMPT, STEPS) == decoding.greedy(decoding.load(packages["split"]),
                                                                                   PROMPT, STEPS)
