"""What Nemotron-H's relu² experts cost on CPU in each form onnxruntime 1.32 can run them.

    python bench/relu2_experts.py [--experts 16] [--top-k 6] [--tokens 1,128] [--runs 21] [--threads 1]

onnxruntime's MoE / QMoE ops have a `relu2` activation on CUDA only; their CPU kernels take relu, gelu, silu,
swiglu and identity. One routed-expert block at Nemotron 3 Nano's expert shape (hidden 2688, expert FFN 1856;
`--experts` of them, top `--top-k`), float32 activations, its forms:

- `swiglu-dup`: what mtpc emits for CPU (`graphs/moe.py`): the fused MoE op, SwiGLU over the up rows twice
  (`[u0, u0, u1, u1, ...]`, alpha 1e4: u * sigmoid(1e4 u) * u = relu(u)^2 within 5e-9), float weights;
- `swiglu-dup int4`: the same in QMoE, 4-bit blocks of 32, accuracy level 4 (the CPU profile's int4 default);
- `plain`: exact relu² in basic ops, every expert on every token weighted by the (zero off the top-k) routing
  weights: one batched MatMul per projection;
- `relu (cost)`: the fused MoE op with FC1 the up rows once and a plain ReLU: not relu², but the work a native
  relu2 kernel would do, to price the duplicated rows.

A decode step is one token, a prefill chunk `--tokens`; the forms alternate call by call, medians of `--runs`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HIDDEN, INTER = 2688, 1856


def _model(nodes, inputs, initializers):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "experts", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(v, n) for n, v in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def forms(experts: int, top_k: int, seed: int = 0) -> dict:
    from onnx import helper

    from mtpc.graphs.moe import RELU2_ALPHA

    rng = np.random.default_rng(seed)
    up = (rng.standard_normal((experts, INTER, HIDDEN)) * 0.02).astype(np.float32)
    down = (rng.standard_normal((experts, HIDDEN, INTER)) * 0.02).astype(np.float32)
    dup = np.stack([up, up], axis=2).reshape(experts, 2 * INTER, HIDDEN)
    io = [("x", ["T", HIDDEN]), ("r", ["T", experts])]
    swiglu = dict(k=top_k, activation_type="swiglu", swiglu_fusion=1, activation_alpha=RELU2_ALPHA, activation_beta=0.0,
                  normalize_routing_weights=1)
    out = {"swiglu-dup": _model([helper.make_node("MoE", ["x", "r", "fc1", "", "fc2"], ["y"], domain="com.microsoft",
                                                  **swiglu)], io, {"fc1": dup, "fc2": down})}
    blocks = 32
    q1 = rng.integers(0, 255, (experts, 2 * INTER, HIDDEN // 2), dtype=np.uint8)
    s1 = (rng.random((experts, 2 * INTER, HIDDEN // blocks)) * 0.01).astype(np.float32)
    q2 = rng.integers(0, 255, (experts, HIDDEN, INTER // 2), dtype=np.uint8)
    s2 = (rng.random((experts, HIDDEN, INTER // blocks)) * 0.01).astype(np.float32)
    out["swiglu-dup int4"] = _model([helper.make_node(
        "QMoE", ["x", "r", "q1", "s1", "", "q2", "s2"], ["y"], domain="com.microsoft", expert_weight_bits=4,
        block_size=blocks, accuracy_level=4, **swiglu)], io, {"q1": q1, "s1": s1, "q2": q2, "s2": s2})
    out["relu (cost)"] = _model([helper.make_node("MoE", ["x", "r", "fc1", "", "fc2"], ["y"], domain="com.microsoft",
                                                  k=top_k, activation_type="relu", normalize_routing_weights=1)],
                                io, {"fc1": up, "fc2": down})
    plain = [  # x [T, H] @ up^T per expert -> relu^2 -> @ down^T, weighted by w [T, E] (zero off the top-k)
        helper.make_node("MatMul", ["x", "up_t"], ["h"]),  # [E, T, I]
        helper.make_node("Relu", ["h"], ["a"]), helper.make_node("Mul", ["a", "a"], ["a2"]),
        helper.make_node("MatMul", ["a2", "down_t"], ["o"]),  # [E, T, H]
        helper.make_node("Transpose", ["r"], ["w_t"], perm=[1, 0]), helper.make_node("Unsqueeze", ["w_t", "last"], ["w"]),
        helper.make_node("Mul", ["o", "w"], ["ow"]), helper.make_node("ReduceSum", ["ow", "zero"], ["y"], keepdims=0),
    ]
    out["plain"] = _model(plain, io, {"up_t": np.ascontiguousarray(up.transpose(0, 2, 1)),
                                      "down_t": np.ascontiguousarray(down.transpose(0, 2, 1)),
                                      "last": np.asarray([-1], np.int64), "zero": np.asarray([0], np.int64)})
    return out


def main(argv=None) -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=6)
    parser.add_argument("--tokens", default="1,128")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions = {n: ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                for n, m in forms(args.experts, args.top_k).items()}
    rng = np.random.default_rng(1)
    print(f"{args.experts} experts, top-{args.top_k}, hidden {HIDDEN}, expert FFN {INTER}, {args.threads} thread(s)")
    print(f"{'tokens':>6} " + " ".join(f"{n:>17}" for n in sessions) + "   (tok/s; CPU ms per call)")
    for tokens in (int(t) for t in args.tokens.split(",")):
        x = rng.standard_normal((tokens, HIDDEN)).astype(np.float32)
        logits = rng.standard_normal((tokens, args.experts)).astype(np.float32)
        top = np.argsort(-logits, axis=-1)[:, : args.top_k]
        dense = np.zeros_like(logits)
        np.put_along_axis(dense, top, 1.0 / args.top_k, axis=-1)
        feeds = {n: {"x": x, "r": dense if n == "plain" else logits} for n in sessions}
        for n, s in sessions.items():
            s.run(None, feeds[n])
        wall, cpu = {n: [] for n in sessions}, {n: [] for n in sessions}
        for _ in range(args.runs):
            for n, s in sessions.items():
                w, c = time.perf_counter(), time.process_time()
                s.run(None, feeds[n])
                wall[n].append(time.perf_counter() - w)
                cpu[n].append(time.process_time() - c)
        print(f"{tokens:>6} " + " ".join(f"{tokens / median(wall[n]):8.1f} {1000 * median(cpu[n]):8.1f}" for n in sessions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
