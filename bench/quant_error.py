"""How far each int4 recipe moves the trained model from its float self, on held-out text: one table.

    .venv/bin/python bench/quant_error.py [--windows 48] [--length 512] [--recipes NAME,...] [--work DIR]
                                          [--json FILE]

The float model is transformers' `Qwen3_5ForCausalLM` on models/qwen35-stdlib-mtp (float32
compute on its bfloat16 weights). Every recipe is an mtpc package of the same checkpoint (no
head: the table is about the main model), run by onnxruntime on `--windows` held-out windows of
`--length` tokens from an empty state; per token position:

- **KL**: KL(float || quantized) of the next-token distributions, nats per token (mean);
- **top-1**: the share of positions where both pick the same next token;
- **PPL**: the quantized model's perplexity on the held-out text (the float model's in the first row);
- **bytes**: what the main graph stores for its weights (every initializer, the embedding included,
  wherever the package keeps it), and its ratio to llama.cpp's own Q4_K_M of the same model.

Recipes (bench/quant_recipes.py builds each one's `quantization` section): int8; int4
round-to-nearest at blocks 32 / 64 / 128, accuracy levels 0 and 4; the 0.18.0 model builder's
`mixed_layers` choice (and with its `last_matmul`, as its `k_quant_mixed` preset has them);
mlx-lm's `mixed_4_6` rule; llama.cpp's Q4_K_M tensor choices applied to ONNX encodings (what
llama-quantize chose for each tensor of this model, as int4 / int8 blocks); and llama.cpp's own
Q4_K_M and Q4_0 files kept exactly (`keep: source`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.quant_recipes import RECIPES, recipe_body  # noqa: E402
from bench.trained_model import FOLDER, compile_package, gguf, windows  # noqa: E402


def float_logits(data):
    """The float model's logits `[N, L, V]` (float32) over the windows' first L tokens."""
    import numpy as np
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.set_num_threads(1)
    model = Qwen3_5ForCausalLM.from_pretrained(FOLDER, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for row in data:
            out.append(model(input_ids=torch.from_numpy(row[None, :-1])).logits[0].numpy())
    return np.stack(out)


def package_logits(package: Path, data):
    import numpy as np

    from mtpc.verification.runner import GraphRunner

    cfg = json.loads((package / "genai_config.json").read_text())
    decoder = cfg["model"]["decoder"]
    out = []
    for row in data:
        runner = GraphRunner(package / decoder["filename"], decoder.get("inputs", {}), decoder.get("outputs", {}),
                             decoder["num_hidden_layers"], decoder["head_size"])
        logits = runner.run(list(row[:-1]))[runner.outputs.get("logits", "logits")]
        out.append(np.asarray(logits[0], np.float32))
    return np.stack(out)


def stored_bytes(package: Path) -> int:
    """Bytes of every initializer the main graph reads (external data counted by its recorded length)."""
    import onnx

    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    total = 0
    for tensor in model.graph.initializer:
        lengths = [int(e.value) for e in tensor.external_data if e.key == "length"]
        total += lengths[0] if lengths else len(tensor.raw_data)
    return total


def gguf_bytes(path: Path) -> int:
    """Bytes of the trunk's tensors in a GGUF file (the MTP block, `blk.<layers>.*`, left out as the table's
    packages leave the head out)."""
    from gguf import GGUFReader

    layers = json.loads((FOLDER / "config.json").read_text())["num_hidden_layers"]
    return sum(int(t.n_bytes) for t in GGUFReader(path).tensors if not t.name.startswith(f"blk.{layers}."))


def log_softmax(x):
    import numpy as np

    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def perplexity(logprobs, targets) -> float:
    import numpy as np

    return float(np.exp(-np.take_along_axis(logprobs, targets[..., None], -1).mean()))


def errors(reference, logits, targets) -> dict:
    import numpy as np

    p, q = log_softmax(reference), log_softmax(logits)
    kl = (np.exp(p) * (p - q)).sum(-1)
    top1 = (reference.argmax(-1) == logits.argmax(-1)).mean()
    return {"kl": float(kl.mean()), "kl_p99": float(np.quantile(kl, 0.99)), "top1": float(top1),
            "ppl": perplexity(q, targets)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=48)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--recipes", help="comma-separated names (default: all)")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="mtpc-quant-error-"))
    data = windows(args.windows, args.length)
    targets = data[:, 1:]
    print(f"float model on {data.shape[0]} x {args.length} held-out tokens", file=sys.stderr, flush=True)
    reference = float_logits(data)
    rows = [{"recipe": "float (transformers)", "kl": 0.0, "kl_p99": 0.0, "top1": 1.0,
             "ppl": perplexity(log_softmax(reference), targets), "bytes": None}]
    names = args.recipes.split(",") if args.recipes else list(RECIPES)
    for name in names:
        body = recipe_body(name, work)
        source = RECIPES[name].source(work) if RECIPES[name].source else None
        package = compile_package(work, f"q-{name}", body, source=source)
        print(f"{name}: running {package.name}", file=sys.stderr, flush=True)
        rows.append({"recipe": name, **errors(reference, package_logits(package, data), targets),
                     "bytes": stored_bytes(package)})
    q4km = next((r["bytes"] for r in rows if r["recipe"] == "llama.cpp Q4_K_M (kept)"), None)
    q4km_file = gguf_bytes(gguf(work, "Q4_K_M")) if q4km else None
    lines = ["| recipe | KL nats/token (p99) | top-1 agree | PPL | main-graph bytes | x Q4_K_M package | x Q4_K_M GGUF |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        size = f"{r['bytes'] / 2**20:.2f} MiB" if r["bytes"] else "-"
        ratios = [f"{r['bytes'] / ref:.2f}" if r["bytes"] and ref else "-" for ref in (q4km, q4km_file)]
        lines.append(f"| {r['recipe']} | {r['kl']:.5f} ({r['kl_p99']:.4f}) | {r['top1']:.2%} | {r['ppl']:.3f} | "
                     f"{size} | {' | '.join(ratios)} |")
    print("\n".join(lines))
    if q4km_file:
        print(f"\nllama.cpp's Q4_K_M file holds the trunk in {q4km_file / 2**20:.2f} MiB (its own block types); "
              "mtpc's keep: source package of it stores those blocks in onnxruntime's forms")
    print(f"\n{data.shape[0]} windows x {args.length} tokens of held-out code; "
          "KL(float || recipe) per token, mean and 99th percentile")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
