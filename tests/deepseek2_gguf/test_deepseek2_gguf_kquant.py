"""A deepseek2 GGUF with k-quant blocks (Q4_K, Q6_K), kept as stored: MLA's row-permuted weights stay exact.

llama-quantize is not built here (the tests build only llama.cpp's `llama-speculative-simple`), and the
conformance fixture's rows (64 wide) are shorter than a k-quant super-block (256). So the converter's f32 file
of a release whose matrices are 256 wide (`conftest.WIDE`) has every matrix a k-quant can block re-encoded by
tests/fixtures/kquant_encoder.py (valid ggml blocks, gguf-py's dequantization the oracle), as llama-quantize
would choose them for Q4_K (routers, norms and `attn_k_b`, whose rows are qk_nope_head_dim long, stay as
converted). Compiled with `keep: source` and float activations: the rope-row-permuted `q_b_proj` /
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
from tests.fixtures import kquant_encoder
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
    spec = write_spec(ds_workdir / f"ds-wide-{qtype}.yaml", f"ds-wide-{qtype}", f"{{gguf: {path.name}}}", KEEP)
    package = compile_spec(spec, ds_workdir / f"pkg-ds-wide-{qtype}")
    weights = {w["name"]: w for w in json.loads((package / "quantization.json").read_text())["weights"]}
    for name in ("layers.1.self_attn.q_b_proj.weight", "layers.1.self_attn.kv_a_proj_with_mqa.weight",
                 "mtp.layers.0.self_attn.q_b_proj.weight"):
        assert (weights[name]["source"], weights[name]["stored"]["kind"], weights[name]["lossless"]) == (
            qtype, "MatMulNBits", True), weights[name]
    kv_b = weights["layers.1.self_attn.kv_b_proj.weight"]
    # k_b f32 (its rows are 32 long), v_b a k-quant: the whole read as v_b's exact dequantization
    assert (kv_b["source"], kv_b["stored"]["kind"], kv_b["lossless"]) == (qtype, "float", True), kv_b
    assert all(w["lossless"] for w in weights.values()), [n for n, w in weights.items() if not w["lossless"]]
    assert main(["verify", str(package), "--spec", str(spec)]) == 0, capsys.readouterr()
    ref = SourceRef("gguf", str(path))
    info = gguf.describe(ref)
    main_model, head = decoding.load(package), decoding.load(package / "mtp")
    greedy = decoding.greedy(main_model, PROMPT, STEPS)
    assert greedy == DecoderReference(info.architecture, gguf.open_weights(ref, info)).greedy(PROMPT, STEPS)
    assert decoding.speculative(main_model, head, PROMPT, STEPS, 2).tokens == greedy
