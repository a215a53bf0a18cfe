"""GGUF types whose exact form needs more than MatMulNBits' defaults, kept as stored, in onnxruntime-genai.

Q4_1 blocks carry a minimum (`w = d*q + m`): MatMulNBits gets float zero points. Q5_1 codes
are 5 bits: 8-bit MatMulNBits plus a per-block offset term the graph adds from the
activations' block sums. A Q4_1 embedding becomes GatherBlockQuantized plus gathered
offsets (that op takes no float zero points), and a Q5_1 LM head the offset term too
(`sources/gguf_quant.py` derives each form). The package must decode exactly like the
numpy reference run on gguf-py's dequantization of the same file (accuracy_level 0: float
activations, so nothing but the weights could differ).
"""

from __future__ import annotations

import onnx
import pytest
from gguf import GGMLQuantizationType as QT

from mtpc import sources
from mtpc.ir import SourceRef
from mtpc.reference.forward import Qwen35Reference
from tests.fixtures.fitted_head import PROMPTS, write_fitted_gguf

from .conftest import compile_spec, write_spec
from .decoding import greedy, load, speculative

BLOCK_FORM_TYPES = (
    ("token_embd.weight", QT.Q4_1),
    ("output.weight", QT.Q5_1),
    ("*.nextn.eh_proj.weight", QT.Q5_0),
    ("blk.*.attn_*.weight", QT.Q4_1),
    ("blk.*.ffn_*.weight", QT.Q5_1),
    ("blk.*.ssm_out.weight", QT.Q4_1),
)


@pytest.fixture(scope="module")
def gguf_path(arch, workdir):
    return write_fitted_gguf(workdir / "block-forms.gguf", arch, types=BLOCK_FORM_TYPES)


@pytest.fixture(scope="module")
def package(gguf_path, workdir):
    spec = write_spec(
        workdir / "block-forms.yaml", "block-forms", "{gguf: block-forms.gguf}", "quantization:\n  default: {keep: source, accuracy_level: 0}\n"
    )
    return compile_spec(spec, workdir / "block-forms")


def _graph(path):
    return onnx.load(str(path), load_external_data=False).graph


def test_every_quantized_tensor_is_kept_in_block_form(package):
    graph = _graph(package / "model.onnx")
    ops = {n.op_type for n in graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized", "ReduceSum"} <= ops
    floats = [i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2]
    # Besides block scales / zero points / offsets, the only 2-D floats are the gates the mix stores F32
    # (packed into one in_proj_a_b MatMul on CPU) and out_proj, whose 16-wide value heads would split
    # 32-element blocks when regrouped.
    weights = [n for n in floats if not n.endswith(("_scales", "_zp", "_offsets", ".scales", ".zero_points"))]
    allowed = (".in_proj_a.", ".in_proj_b.", ".in_proj_a_b.", ".out_proj.")
    assert weights and all(any(a in n for a in allowed) for n in weights), weights
    bits = {a.i for n in graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
    assert bits == {4, 8}


@pytest.mark.parametrize("prompt", PROMPTS[:1])
def test_greedy_matches_the_reference_on_dequantized_weights(package, arch, gguf_path, prompt):
    ref = SourceRef("gguf", str(gguf_path))
    reference = Qwen35Reference(arch, sources.open_weights(ref, sources.describe(ref)))
    assert greedy(load(package), list(prompt), 20) == reference.greedy(list(prompt), 20)


@pytest.mark.parametrize("max_draft", [1, 4])
def test_speculative_decoding_equals_greedy(package, max_draft):
    prompt = list(PROMPTS[0])
    main, head = load(package), load(package / "mtp")
    assert speculative(main, head, prompt, 20, max_draft).tokens == greedy(main, prompt, 20)
