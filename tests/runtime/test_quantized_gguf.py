"""A quantized GGUF compiled with `keep: source`, run in onnxruntime-genai.

The file mixes Q4_0 projections, a Q8_0 `eh_proj` and Q8_0 linear-attention gates
(as real Qwen3.5 MTP GGUFs do), with the embedding and LM head quantized too. Kept
as stored, every quantized tensor becomes MatMulNBits / GatherBlockQuantized data
bit-exactly, so the package must decode exactly like the numpy reference run on
the GGUF's own dequantized weights (gguf-py's dequantizer).
"""

from __future__ import annotations

import onnx
import pytest
from gguf import GGMLQuantizationType as QT

from mtpc import sources
from mtpc.ir import SourceRef
from mtpc.reference.forward import Qwen35Reference
from tests.fixtures.fitted_head import PROMPTS, write_fitted_gguf
from tests.fixtures.gguf_writer import MIXED_TYPES

from .conftest import compile_spec, write_spec
from .decoding import greedy, load, speculative

QUANTIZED_TYPES = MIXED_TYPES + (("token_embd.weight", QT.Q8_0), ("output.weight", QT.Q4_0))


@pytest.fixture(scope="module")
def gguf_path(arch, workdir):
    return write_fitted_gguf(workdir / "quantized.gguf", arch, types=QUANTIZED_TYPES)


@pytest.fixture(scope="module")
def package(gguf_path, workdir):
    spec = write_spec(
        workdir / "quantized-gguf.yaml",
        "quantized-gguf",
        "{gguf: quantized.gguf}",
        "quantization:\n  default: {keep: source, accuracy_level: 0}\n",
    )
    return compile_spec(spec, workdir / "quantized-gguf")


@pytest.fixture(scope="module")
def dequantized_reference(arch, gguf_path):
    ref = SourceRef("gguf", str(gguf_path))
    return Qwen35Reference(arch, sources.open_weights(ref, sources.describe(ref)))


def _ops(path) -> dict[str, set[int]]:
    """op type -> bit widths used (0 for ops without a `bits` attribute)."""
    found: dict[str, set[int]] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        bits = [a.i for a in node.attribute if a.name == "bits"]
        found.setdefault(node.op_type, set()).update(bits or [0])
    return found


def test_source_quantization_is_carried_into_the_graphs(package):
    main = _ops(package / "model.onnx")
    assert main["MatMulNBits"] == {4, 8}
    assert "GatherBlockQuantized" in main
    assert 8 in _ops(package / "mtp" / "mtp.onnx")["MatMulNBits"]  # eh_proj stays Q8_0


@pytest.mark.parametrize("prompt", PROMPTS[:1])
def test_greedy_matches_the_reference_on_dequantized_weights(package, dequantized_reference, prompt):
    expected = dequantized_reference.greedy(list(prompt), 20)
    assert greedy(load(package), list(prompt), 20) == expected


@pytest.mark.parametrize("max_draft", [1, 3])
def test_speculative_decoding_equals_greedy(package, max_draft):
    prompt = list(PROMPTS[0])
    main, head = load(package), load(package / "mtp")
    assert speculative(main, head, prompt, 20, max_draft).tokens == greedy(main, prompt, 20)
