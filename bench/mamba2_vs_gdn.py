"""Prefill and decode speed of Nemotron-H's Mamba2 layers against Qwen3.5's Gated DeltaNet layers of the same size.

    python bench/mamba2_vs_gdn.py [--layers 4] [--prompt 512] [--runs 21] [--threads 1] [--window 0]

Both trunks are `--layers` layers of their recurrent mixer alone at hidden 2048, sized to one recurrent state:
- `gdn`: Qwen3.5-35B-A3B's Gated DeltaNet (16 key heads x 128, 32 value heads x 128: state 32 x 128 x 128), each
  layer followed by a 64-wide SwiGLU MLP (Qwen3.5's layer has one; kept negligible);
- `mamba2`: Nemotron 3 Nano's Mamba2 (64 heads x 64, state 128, 8 groups: state 64 x 128 x 64, the same 524,288
  floats), each a sub-block of its own as Nemotron-H's are.
Vocabulary 256, float32, random weights (`canonical_shapes`), compiled by mtpc for the CPU target with no head;
`--window W` windows the state as a drafting package's is. The main graph runs in onnxruntime 1.32 directly
(what onnxruntime-genai calls each step): a prefill of `--prompt` tokens in one forward, and one decoded token
after it (its states fed back), the two models alternating call by call; medians of `--runs` calls, reported
as tokens per second and as CPU seconds per call (process CPU time, so a busy neighbour does not count).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HIDDEN = 2048


def archs(layers: int):
    from mtpc.ir import LayerKind, LinearAttentionDims, Mamba2Dims
    from tests.fixtures.arch import tiny_arch
    from tests.fixtures.nemotron_h_checkpoints import tiny_nemotron_arch

    gdn = replace(tiny_arch(mtp_num_layers=0), hidden_size=HIDDEN, intermediate_size=64,
                  layer_kinds=(LayerKind.LINEAR_ATTENTION,) * layers,
                  linear_attention=LinearAttentionDims(16, 128, 32, 128, 4), context_length=8192)
    mamba = replace(tiny_nemotron_arch(mtp_num_layers=0), hidden_size=HIDDEN, layer_kinds=(LayerKind.MAMBA2,) * layers,
                    mamba=Mamba2Dims(num_heads=64, head_dim=64, state_size=128, num_groups=8, conv_kernel=4),
                    context_length=8192)
    return {"gdn": gdn, "mamba2": mamba}


def random_store(arch, seed: int = 0):
    """Weights of the right shapes: projections small, norms 1, decays negative (the values do not change the work)."""
    from mtpc.weights import ArrayWeightStore, canonical_shapes

    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in canonical_shapes(arch).items():
        if name.endswith(("decay_scale",)):
            value = -np.exp(rng.uniform(0, 2, shape))
        elif name.endswith(("norm.weight", "D")):
            value = np.ones(shape)
        else:
            value = rng.standard_normal(shape) * 0.02
        out[name] = value.astype(np.float32)
    return ArrayWeightStore(out)


def compile_models(folder: Path, layers: int, window: int) -> dict[str, Path]:
    from mtpc.passes.state_window import windowed_decoder
    from tests.graphs.tiny import emit, make_ir

    out = {}
    for name, arch in archs(layers).items():
        ir = make_ir(arch, heads=())
        if window:
            ir = replace(ir, main=windowed_decoder(ir.main, window))
        emit(ir, random_store(arch), folder / name)
        out[name] = folder / name / "model.onnx"
    return out


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def feeds(sess, ids: np.ndarray, start: int, past: dict | None) -> dict:
    out = {"input_ids": ids, "attention_mask": np.ones((1, start + ids.shape[1]), np.int64)}
    for i in sess.get_inputs():
        if i.name == "position_ids":
            rows = (3, 1, ids.shape[1]) if len(i.shape) == 3 else (1, ids.shape[1])
            out[i.name] = np.broadcast_to(np.arange(start, start + ids.shape[1]), rows).astype(np.int64)
        elif i.name.startswith("past."):
            shape = [1 if isinstance(d, str) else d for d in i.shape]
            out[i.name] = past[i.name.replace("past.", "present.")] if past else np.zeros(shape, np.float32)
    return out


def timed(runners: dict, runs: int) -> dict[str, tuple[float, float]]:
    """(median wall seconds, median CPU seconds) per call of each runner, interleaved call by call."""
    for run in runners.values():
        run()
    wall, cpu = {n: [] for n in runners}, {n: [] for n in runners}
    for _ in range(runs):
        for name, run in runners.items():
            w, c = time.perf_counter(), time.process_time()
            run()
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    return {n: (median(wall[n]), median(cpu[n])) for n in runners}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--window", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        graphs = compile_models(Path(tmp), args.layers, args.window)
        sessions = {name: session(path, args.threads) for name, path in graphs.items()}
        prompt = np.random.default_rng(0).integers(3, 250, (1, args.prompt)).astype(np.int64)
        names = list(sessions)
        prefill_feeds = {n: feeds(sessions[n], prompt, 0, None) for n in names}
        presents = {n: dict(zip([o.name for o in sessions[n].get_outputs()], sessions[n].run(None, prefill_feeds[n])))
                    for n in names}
        step_feeds = {n: feeds(sessions[n], prompt[:, :1], args.prompt, presents[n]) for n in names}
        prefill = timed({n: (lambda n=n: sessions[n].run(None, prefill_feeds[n])) for n in names}, args.runs)
        decode = timed({n: (lambda n=n: sessions[n].run(None, step_feeds[n])) for n in names}, args.runs * 4)
    print(f"{args.layers} layers, hidden {HIDDEN}, float32, {args.threads} thread(s), window {args.window or 'off'}")
    print(f"{'':<8} {'prefill tok/s':>13} {'prefill cpu s':>13} {'decode tok/s':>12} {'decode cpu ms':>13}")
    for n in names:
        (pw, pc), (dw, dc) = prefill[n], decode[n]
        print(f"{n:<8} {args.prompt / pw:13.0f} {pc:13.3f} {1 / dw:12.1f} {1000 * dc:13.2f}")
    (gpw, gpc), (gdw, gdc) = prefill["gdn"], decode["gdn"]
    (mpw, mpc), (mdw, mdc) = prefill["mamba2"], decode["mamba2"]
    print(f"mamba2 / gdn: prefill tok/s {gpw / mpw:.2f}x (CPU {gpc / mpc:.2f}x), decode tok/s {gdw / mdw:.2f}x "
          f"(CPU {gdc / mdc:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
