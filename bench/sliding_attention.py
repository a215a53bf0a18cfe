"""Which form of a sliding-window layer's attention decodes fastest on CPU: one token over T cached tokens.

    python bench/sliding_attention.py [--contexts 4096,16384] [--threads 1] [--runs 21]

The attention alone, as mtpc builds it (`graphs/attention.attend`, the node or ops a package's sliding layer
holds), one graph per form, fed one token's q / k / v, a cache of T random keys and values and a mask of
T + 1 ones:

- `gqa`: com.microsoft GroupQueryAttention with `local_window_size` (and `head_sink`), what CUDA graphs keep;
- `plain`: the plain-op form, scores over the last W + S - 1 cached tokens only (the CPU default);
- `full`: GroupQueryAttention without a window over the same cache, what a full-attention layer costs.

Two shapes: Step-3.5-Flash's sliding layer (96 query heads, 8 KV heads of 128, window 512) and MiMo-V2-Flash's
(64 query heads, 8 KV heads, q/k 192 and v 128 padded into the cache, window 129, sinks). The forms alternate
run by run, so a neighbour's load hits all alike; each cell is the median process CPU time of `--runs` steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from statistics import median

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = {  # name -> (query heads, KV heads, q/k head, v head, window, sinks)
    "step35": (96, 8, 128, 128, 512, False),
    "mimo": (64, 8, 192, 128, 129, True),
}


def session(shape: str, form: str, threads: int):
    """An onnxruntime session of `attend` for one sliding layer of `shape` in `form`."""
    import onnx_ir as oir
    import onnxruntime as ort

    from mtpc.graphs.attention import attend
    from mtpc.graphs.builder import GraphBuilder, GraphData
    from mtpc.graphs.initializers import DataFile
    from mtpc.graphs.parameters import ParameterSource
    from mtpc.graphs.sequence import DenseOps
    from mtpc.ir import GraphContract, LayerAttention, QuantizationPlan, Rope, TensorSpec
    from mtpc.profiles.kernels import fused_kernels
    from mtpc.weights import ArrayWeightStore

    heads, kv_heads, head, value, window, sinks = SHAPES[shape]
    layer = LayerAttention(heads, kv_heads, head, value, Rope(1e4, 1.0, head, position_rows=False),
                           window=None if form == "full" else window, sinks=sinks)
    params = ParameterSource(ArrayWeightStore({}), QuantizationPlan(), "float32", ())
    kernels = replace(fused_kernels("cpu"), window_group_query_attention=form != "plain")
    b = GraphBuilder("attention", params, GraphData("a.onnx", DataFile("a.onnx.data")), kernels)
    contract = GraphContract(
        (TensorSpec("q", "float32", (1, 1, heads * head)), TensorSpec("k", "float32", (1, 1, kv_heads * head)),
         TensorSpec("v", "float32", (1, 1, kv_heads * value)), TensorSpec("sinks", "float32", (heads,)),
         TensorSpec("past_key", "float32", (1, kv_heads, "past", head)),
         TensorSpec("past_value", "float32", (1, kv_heads, "past", head)),
         TensorSpec("attention_mask", "int64", (1, "total"))),
        (TensorSpec("out", "float32", (1, 1, heads * value)),
         TensorSpec("present_key", "float32", (1, kv_heads, "total", head)),
         TensorSpec("present_value", "float32", (1, kv_heads, "total", head))))
    b.declare_inputs(contract)
    i = b.inputs
    out, key, value_out = attend(b, DenseOps(b, i["attention_mask"]), i["q"], i["k"], i["v"], i["past_key"],
                                 i["past_value"], layer, i["sinks"] if sinks else None)
    model = b.finish(contract, {"out": out, "present_key": key, "present_value": value_out}).model
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads, options.log_severity_level = threads, 1, 3
    return ort.InferenceSession(oir.serde.serialize_model(model).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def feeds(shape: str, context: int) -> dict[str, np.ndarray]:
    heads, kv_heads, head, value, _, _ = SHAPES[shape]
    gen = np.random.default_rng(0)
    f32 = lambda *s: gen.standard_normal(s, np.float32)  # noqa: E731
    return {"q": f32(1, 1, heads * head), "k": f32(1, 1, kv_heads * head), "v": f32(1, 1, kv_heads * value),
            "sinks": f32(heads), "past_key": f32(1, kv_heads, context, head), "past_value": f32(1, kv_heads, context, head),
            "attention_mask": np.ones((1, context + 1), np.int64)}


def measure(shape: str, context: int, threads: int, runs: int) -> dict[str, float]:
    forms = ("gqa", "plain", "full")
    sessions = {f: session(shape, f, threads) for f in forms}
    data = feeds(shape, context)
    times: dict[str, list[float]] = {f: [] for f in forms}
    for f in forms:  # warm up
        sessions[f].run(["out"], data)
    for _ in range(runs):
        for f in forms:
            start = time.process_time()
            sessions[f].run(["out"], data)
            times[f].append(time.process_time() - start)
    return {f: median(t) for f, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="4096,16384")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args(argv)
    print("| shape | threads | context | gqa ms | plain ms | full ms | gqa / plain | full / gqa |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        for threads in map(int, args.threads.split(",")):
            for context in map(int, args.contexts.split(",")):
                t = measure(shape, context, threads, args.runs)
                print(f"| {shape} | {threads} | {context} | {t['gqa'] * 1e3:.2f} | {t['plain'] * 1e3:.2f} | "
                      f"{t['full'] * 1e3:.2f} | {t['gqa'] / t['plain']:.2f}x | {t['full'] / t['gqa']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
