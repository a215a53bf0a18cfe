"""Qwen3.5-MoE packages for onnx-genai from real-format sources (an HF release folder and llama.cpp's GGUF of it),
loaded by onnx-genai's own parser and MTP validators (ong-check) with the MTP proposer resolved to their sidecar.

Every package a test writes goes through ong-check anyway (tests/clients/onnx_genai.py); the MoE runtime tests
build for onnxruntime-genai only, so these build the onnx_genai target from the same sources, and say what
onnx-genai resolves.
"""

from __future__ import annotations

import pytest

import mtpc
from tests.clients import onnx_genai
from tests.runtime.conftest import compile_spec

ONNX_GENAI_ONLY = "targets:\n  onnx_genai: {layout: flat}\n"


@pytest.mark.parametrize("kind", ["hf", "gguf"])
def test_a_moe_package_loads_in_onnx_genai_with_its_head(request, moe_workdir, moe_arch, kind):
    onnx_genai.require()
    source = (request.getfixturevalue("moe_release_with_tokenizer") if kind == "hf"
              else request.getfixturevalue("moe_gguf"))
    spec = moe_workdir / f"onnx-genai-{kind}.yaml"
    spec.write_text(f"mtpc: 1\nname: moe-onnx-genai-{kind}\nsource: {{{kind}: {source.name}}}\n{ONNX_GENAI_ONLY}",
                    encoding="utf-8")
    package = compile_spec(spec, moe_workdir / f"pkg-onnx-genai-{kind}")
    assert mtpc.check(package).exit_code == 0
    report = onnx_genai.assert_loads(package)
    assert report["speculative"]["status"] == "mtp"
    resolved = report["speculative"]["resolved"]
    assert resolved["target_hidden_size"] == moe_arch.hidden_size and report["speculative"]["target_vocab_size"] == moe_arch.vocab_size
