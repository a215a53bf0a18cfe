"""Every family's release and llama.cpp's f32 GGUF of it, for the targets the runtime tests do not run here:
onnx-genai (loaded by its own parser and MTP validators, `ong-check`, with the MTP proposer resolved to the
package's sidecar) and onnxruntime-genai's paged attention (CUDA-only, so checked statically: `mtpc check`
and the packed `[num_tokens, ...]` I/O)."""

from __future__ import annotations

import onnx
import pytest

import mtpc
from mtpc.cli.main import main
from tests.clients import onnx_genai
from tests.runtime.conftest import compile_spec

from .families import FAMILIES, family

NAMES = sorted(FAMILIES)
# Every family from its release, and from llama.cpp's GGUF of it where mtpc reads that (`unsupported`).
CASES = [(n, kind) for n in NAMES for kind in ("hf", "gguf") if kind == "hf" or family(n).supports("llama.cpp converter")]


def _source(request, name: str, kind: str):
    if kind == "hf":
        return request.getfixturevalue("releases")[name]
    return request.getfixturevalue("ggufs")[name]["f32"]


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_the_onnx_genai_package_loads_with_its_head(request, conformance_dir, name, kind):
    onnx_genai.require()
    arch = family(name).arch
    source = _source(request, name, kind)
    spec = conformance_dir / f"onnx-genai-{name}-{kind}.yaml"
    spec.write_text(f"mtpc: 1\nname: onnx-genai-{name}\nsource: {{{kind}: {source.name}}}\n"
                    "targets:\n  onnx_genai: {layout: flat}\n", encoding="utf-8")
    package = compile_spec(spec, conformance_dir / f"pkg-onnx-genai-{name}-{kind}")
    assert mtpc.check(package).exit_code == 0
    report = onnx_genai.assert_loads(package)
    assert report["speculative"]["status"] == "mtp"
    resolved = report["speculative"]["resolved"]
    assert resolved["target_hidden_size"] == arch.hidden_size
    assert report["speculative"]["target_vocab_size"] == arch.vocab_size


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_paged_package_passes_the_static_checks(request, conformance_dir, capsys, name, kind):
    source = _source(request, name, kind)
    spec = conformance_dir / f"paged-{name}-{kind}.yaml"
    spec.write_text(f"mtpc: 1\nname: paged-{name}\nsource: {{{kind}: {source.name}}}\nprecision: {{io_dtype: float16}}\n"
                    "targets:\n  onnxruntime_genai: {execution_provider: cuda, attention: paged}\n", encoding="utf-8")
    package = compile_spec(spec, conformance_dir / f"pkg-paged-{name}-{kind}")
    assert main(["check", str(package)]) == 0, capsys.readouterr()
    positions = [3, "num_tokens"] if family(name).arch.rope.position_rows else ["num_tokens"]
    for graph in ("model.onnx", "mtp/mtp.onnx"):
        inputs = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
                  for i in onnx.load(str(package / graph), load_external_data=False).graph.input}
        assert inputs["input_ids"] == ["num_tokens"] and inputs["position_ids"] == positions, (graph, inputs)
