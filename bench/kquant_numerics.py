"""How far carried block-quantized weights compute from their float values, in mtpc (CPU default) and in llama.cpp.

    .venv/bin/python bench/kquant_numerics.py [--no-llama] [--json FILE]

1. The model (tests/fixtures/kquant_numerics.py): the k-quant test model (`kquant_arch`, seeded
   weights, every row a multiple of 256; its linear-attention key heads as wide as its value heads,
   which llama.cpp's qwen35 needs) as llama.cpp's Q4_K_M and Q5_K_M mixes, and each file's
   float reference (every tensor replaced by gguf-py's dequantization of it, F32), so the weights
   are equal and only the arithmetic differs. Tokens: the fitted-head prompt (6 tokens), then the
   float model's greedy continuation, forced: 32 positions. Error at a position:
   ||logits - float logits||_2 / ||float logits||_2, each runtime against its own float run:
   - mtpc: the file compiled with `keep: source` and no `accuracy_level` (the CPU profile's
     default, 4: MatMulNBits rounds the activations to int8 per block of 32, 16 for Q6_K), the
     float file compiled as float, `model.onnx` in onnxruntime, one prefill of all the tokens;
     `accuracy_level: 0` (float activations) as the floor (float16 logits: the CPU profile's
     with a head);
   - llama.cpp: both files evaluated by llama-cpp-python (built once from its PyPI sdist,
     bench/llama_bench_build.py), the tokens in one batch, logits at every position, 1 thread;
   - llama.cpp's rounding in numpy: the float64 reference with each block-quantized matmul's
     activations rounded as ggml does (Q8_K per 256 for k-quants): the model the tests use
     (tests/sources/test_kquant_default_numerics.py), printed beside the real llama.cpp.
2. Every carried type alone: one `[64, 512] x [512, 256]` matmul, weights from gguf-py's or the
   test k-quant encoder's quantization of N(0, 0.02) values where one exists (random codes and
   block parameters from the test block encoder otherwise), activations N(0, 1) with 8 of the 512
   channels 10x (the outlier features of LLM hidden states); relative error of the whole output
   against float64 `x @ W.T`: onnxruntime's MatMulNBits at level 4 on mtpc's stored form (plus its
   offset term), and llama.cpp's activation rounding for that type in numpy.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mtpc.reference.forward import Qwen35Reference  # noqa: E402
from tests.fixtures import kquant_numerics as kn  # noqa: E402
from tests.fixtures.kquant_numerics import numerics_arch  # noqa: E402

LEVEL_4 = "mtpc, accuracy_level 4 (the CPU default)"
LEVEL_0 = "mtpc, accuracy_level 0"
LLAMA = "llama.cpp"
LLAMA_ROUNDING = "llama.cpp's rounding, numpy"


def llama_logits(gguf: Path, tokens: list[int]) -> np.ndarray:
    from bench.llama_bench_build import llama_cpp_python

    llama_cpp = llama_cpp_python()
    model = llama_cpp.Llama(str(gguf), n_ctx=64, n_batch=64, n_ubatch=64, logits_all=True, n_threads=1, verbose=False)
    model.eval(tokens)
    logits = np.array(model.scores[: len(tokens)], np.float64)
    model.close()
    return logits


def model_rows(folder: Path, mix: str, with_llama: bool) -> dict:
    arch = numerics_arch()
    quantized, dequantized = kn.write_files(folder, arch, mix)
    tokens = kn.forced_tokens(dequantized, arch)
    _, float_package = kn.compiled(folder, dequantized, "float")
    float_logits = kn.package_logits(float_package, arch, tokens)
    rows = {}
    for label, level in ((LEVEL_4, ""), (LEVEL_0, ", accuracy_level: 0")):
        _, package = kn.compiled(folder, quantized, f"level{level[-1:] or 4}",
                                 f"quantization:\n  default: {{keep: source{level}}}\n")
        rows[label] = kn.summary(kn.relative_errors(kn.package_logits(package, arch, tokens), float_logits))
    out = {"mix": mix, "tokens": tokens, "rows": rows}
    if with_llama:
        llama_float = llama_logits(dequantized, tokens)
        rows[LLAMA] = kn.summary(kn.relative_errors(llama_logits(quantized, tokens), llama_float))
        out["float runs, llama.cpp vs mtpc"] = float(kn.relative_errors(llama_float, float_logits).max())
    reference = Qwen35Reference(arch, kn._store(dequantized)[1]).forward(np.asarray([tokens]))[0][0]
    rows[LLAMA_ROUNDING] = kn.summary(kn.relative_errors(kn.llama_cpp_rounding(quantized, arch, tokens), reference))
    return out


# ------------------------------------------------------------------------------- one matmul per type

N, K, M = 256, 512, 64


def _weights(qtype) -> np.ndarray:
    """Raw blocks `[N, bytes]` of N(0, 0.02) weights in `qtype`, or of random codes where no encoder exists."""
    from gguf.quants import quantize

    from tests.fixtures import kquant_encoder
    from tests.sources.gguf_block_encoders import encode

    w = np.random.default_rng(1).normal(0, 0.02, (N, K)).astype(np.float32)
    if qtype in kquant_encoder.K_QUANTS:
        return kquant_encoder.quantize(w, qtype), "encoded"
    try:
        return quantize(w, qtype).reshape(N, -1), "encoded"
    except NotImplementedError:
        from gguf.constants import GGML_QUANT_SIZES

        raw, _ = encode(qtype, np.random.default_rng(2), N * K // GGML_QUANT_SIZES[qtype][0], moderate=True)
        return raw.reshape(N, -1), "random codes"


def _matmulnbits(qt, level: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(qt.data, "B"), numpy_helper.from_array(qt.scales, "scales")]
    names = ["A", "B", "scales"]
    if qt.zero_points is not None:
        inits.append(numpy_helper.from_array(qt.zero_points, "zp"))
        names.append("zp")
    nodes = [helper.make_node("MatMulNBits", names, ["Y" if qt.block_offsets is None else "Y0"], domain="com.microsoft",
                              K=K, N=N, bits=qt.bits, block_size=qt.block_size, accuracy_level=level)]
    if qt.block_offsets is not None:  # the graphs' offset term (compiler/graphs)
        inits += [numpy_helper.from_array(np.array([-1, K // qt.block_size, qt.block_size], np.int64), "shape"),
                  numpy_helper.from_array(np.array([-1], np.int64), "last"),
                  numpy_helper.from_array(np.ascontiguousarray(qt.block_offsets.T), "offsets")]
        nodes += [helper.make_node("Reshape", ["A", "shape"], ["blocks"]),
                  helper.make_node("ReduceSum", ["blocks", "last"], ["sums"], keepdims=0),
                  helper.make_node("MatMul", ["sums", "offsets"], ["Y1"]), helper.make_node("Add", ["Y0", "Y1"], ["Y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def type_rows() -> list[dict]:
    from gguf.quants import dequantize

    from mtpc.sources.gguf.blocks import FORMATS
    from mtpc.sources.gguf.quant import carry_over, to_quantized_tensor

    x = np.random.default_rng(3).standard_normal((M, K)).astype(np.float32)
    x[:, ::64] *= 10
    rows = []
    for qtype in sorted(FORMATS, key=lambda t: t.name):
        raw, weights = _weights(qtype)
        w = dequantize(raw, qtype).astype(np.float64)
        exact = x.astype(np.float64) @ w.T
        qt = to_quantized_tensor(raw, qtype, N, K)
        ours = _matmulnbits(qt, 4).run(None, {"A": x})[0].astype(np.float64)
        row = {"type": qtype.name, "weights": weights, "form": carry_over(qtype).zero_points,
               "mtpc": float(np.linalg.norm(ours - exact) / np.linalg.norm(exact))}
        if qtype.name in kn.VEC_DOT:
            theirs = kn.round_activations(x, qtype.name) @ w.T
            row["llama.cpp rounding"] = float(np.linalg.norm(theirs - exact) / np.linalg.norm(exact))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-llama", action="store_true", help="no real llama.cpp run (it needs a one-time build)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        for mix in kn.MIXES:
            folder = Path(tmp) / mix
            folder.mkdir()
            models.append(model_rows(folder, mix, not args.no_llama))
    print(f"relative logit error against the runtime's own float run, {kn.POSITIONS} forced positions")
    print("| file | runtime | prompt's last position | median | worst (position) |")
    print("|---|---|---:|---:|---:|")
    for model in models:
        for label, row in model["rows"].items():
            print(f"| {model['mix']} | {label} | {row['prompt_last']:.4f} | {row['median']:.4f} | "
                  f"{row['worst']:.4f} ({row['worst_position']}) |")
    for model in models:
        if "float runs, llama.cpp vs mtpc" in model:
            print(f"{model['mix']}: the float runs, llama.cpp vs mtpc, worst position: "
                  f"{model['float runs, llama.cpp vs mtpc']:.1e}")
    types = type_rows()
    print(f"\none [{M}, {K}] x [{K}, {N}] matmul per carried type, relative error of the output")
    print("| type | weights | mtpc form (zero points) | mtpc, level 4 | llama.cpp's rounding | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for row in types:
        theirs = row.get("llama.cpp rounding")
        ratio = f"{row['mtpc'] / theirs:.2f}" if theirs else "-"
        print(f"| {row['type']} | {row['weights']} | {row['form']} | {row['mtpc']:.2e} | "
              f"{f'{theirs:.2e}' if theirs else '-'} | {ratio} |")
    if args.json:
        args.json.write_text(json.dumps({"models": models, "types": types}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
