"""A deepseek2 GGUF with k-quant blocks, kept as stored: MLA's row-permuted weights stay exact.

The conformance fixture's rows (64 wide) are shorter than a k-quant super-block (256), so these start from
the converter's f32 file of a release whose matrices are 256 wide (`conftest.WIDE`), quantized two ways:

- by llama.cpp's own `llama-quantize` to Q4_K_M, the mix people download: Q4_K, Q5_K and Q6_K matrices,
  `attn_k_b` (rows qk_nope_head_dim long) Q5_0, the embedding Q4_K, routers and norms f32;
- with every matrix a k-quant can block re-encoded Q4_K or Q6_K alone by tests/fixtures/kquant_encoder.py
  (valid ggml blocks, gguf-py's dequantization the oracle), routers, norms and `attn_k_b` as converted.
 Compiled with `keep: source` and float activations: the rope-row-permuted `q_b_proj` /
`kv_a_proj_with_mqa` are carried block for block (lossless), kv_b_proj from a k-quant `attn_v_b` is its exact
dequantization, `mtpc verify` holds the graphs to the numpy reference on the file's own values, og greedy
equals that reference, and MTP equals greedy.
"""

from __future__ import annotations

import json

import pytest
from gguf import GGMLQuantizationType as QT

from mtpc.cli.main import main
from mtpc.ir import SourceRef
from mtpc.reference.forward import DecoderReference
from mtpc.sources.gguf import reader as gguf
from tests.clients import llama_cpp_runtime
from tests.fixtures import kquant_encoder
from tests.fixtures.llama_cpp_tools import llama_quantize  # noqa: F401  (a fixture)
from tests.fixtures.gguf_requantize import requantize
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec

PATTERNS = ("blk.*.attn_q_a.weight", "blk.*.attn_q_b.weight", "blk.*.attn_kv_a_mqa.weight", "blk.*.attn_v_b.weight",
            "blk.*.attn_output.weight", "blk.*.ffn_gate.weight", "blk.*.ffn_up.weight", "blk.*.ffn_down.weight",
            "blk.*.ffn_*_exps.weight", "blk.*.ffn_*_shexp.weight", "blk.*.nextn.eh_proj.weight", "output.weight")
KEEP = "quantization:\n  default: {keep: source, accuracy_level: 0}\n"
PROMPT = [45, 12, 77, 30, 61, 8]


def _encode(values, qtype):
    """The test encoder row by row, for stacks too (attn_v_b [N, v, R], expert stacks [E, I, H])."""
    rows = kquant_encoder.quantize(values.reshape(-1, values.shape[-1]), qtype)
    return rows.reshape(*values.shape[:-1], -1)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K"])
def test_k_quant_blocks_of_mla_weights_compile_exactly_and_decode(ds_workdir, wide_gguf, capsys, qtype):
    path = requantize(wide_gguf, ds_workdir / f"ds-wide-{qtype}.gguf", PATTERNS, QT[qtype], encode=_encode)
    package, spec, weights = _compiled(ds_workdir, path, qtype)
    for name in ("layers.1.self_attn.q_b_proj.weight", "layers.1.self_attn.kv_a_proj_with_mqa.weight",
                 "mtp.layers.0.self_attn.q_b_proj.weight"):
        assert (weights[name]["source"], weights[name]["stored"]["kind"], weights[name]["lossless"]) == (
            qtype, "MatMulNBits", True), weights[name]
    kv_b = weights["layers.1.self_attn.kv_b_proj.weight"]
    # k_b f32 (its rows are 32 long), v_b a k-quant: the whole read as v_b's exact dequantization
    assert (kv_b["source"], kv_b["stored"]["kind"], kv_b["lossless"]) == (qtype, "float", True), kv_b
    _holds(package, spec, path, weights, capsys)


def test_llama_quantize_q4_k_m_compiles_exactly_and_decodes(ds_workdir, wide_gguf, llama_quantize, capsys):
    path = llama_cpp_runtime.quantize(wide_gguf, ds_workdir / "ds-wide-Q4_K_M.gguf", "Q4_K_M")
    package, spec, weights = _compiled(ds_workdir, path, "Q4_K_M")
    carried = {w["source"] for w in weights.values() if w["stored"]["kind"] == "MatMulNBits"}
    assert {"Q4_K", "Q6_K"} <= carried, carried  # the mix, carried as stored
    for name in ("layers.1.self_attn.q_b_proj.weight", "layers.1.self_attn.kv_a_proj_with_mqa.weight"):
        assert (weights[name]["source"], weights[name]["stored"]["kind"]) == ("Q4_K", "MatMulNBits"), weights[name]
    # k_b Q5_0 (its 32-long rows), v_b Q4_K: kv_b_proj is their exact dequantization, reassembled
    assert weights["layers.1.self_attn.kv_b_proj.weight"]["stored"]["kind"] == "float"
    _holds(package, spec, path, weights, capsys)


def _compiled(workdir, path, tag: str):
    spec = write_spec(workdir / f"ds-wide-{tag}.yaml", f"ds-wide-{tag}", f"{{gguf: {path.name}}}", KEEP)
    package = compile_spec(spec, workdir / f"pkg-ds-wide-{tag}")
    weights = {w["name"]: w for w in json.loads((package / "quantization.json").read_text())["weights"]}
    return package, spec, weights


def _holds(package, spec, path, weights, capsys) -> None:
    """Every weight lossless; verify; og greedy equals the numpy reference on the file's own values; MTP equals greedy."""
    assert all(w["lossless"] for w in weights.values()), [n for n, w in weights.items() if not w["lossless"]]
    assert main(["verify", str(package), "--spec", str(spec)]) == 0, capsys.readouterr()
    ref = SourceRef("gguf", str(path))
    info = gguf.describe(ref)
    main_model, head = decoding.load(package), decoding.load(package / "mtp")
    greedy = decoding.greedy(main_model, PROMPT, STEPS)
    assert greedy == DecoderReference(info.architecture, gguf.open_weights(ref, info)).greedy(PROMPT, STEPS)
    assert decoding.speculative(main_model, head, PROMPT, STEPS, 2).tokens == greedy
