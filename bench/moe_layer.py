"""Peak memory of compiling MoE layers at Qwen3.5-MoE 35B-A3B's per-layer size, experts in slabs or whole.

    python bench/moe_layer.py [--folder DIR] [--jobs N]

Writes a sparse bf16 HF checkpoint of two Qwen3.5-MoE layers (one linear-attention, one full)
shaped like 35B-A3B's: hidden 2048, 256 experts of width 512, a shared expert of 512. Layer 0's
experts are fused as Qwen's release stores them (`gate_up_proj` [256, 1024, 2048], `down_proj`),
layer 1's one tensor per expert as transformers saves them: 1.5 GiB of expert bytes a layer, all
of them a hole in the file (zeros, read from no disk). Then compiles it with `mtpc compile`, float
(io float16, the MoE op) and int4 QMoE, each with the expert stacks written a few experts at a
time (the default) and whole (`STREAM_BYTES` set past every tensor: what mtpc did before), A/B
interleaved, and prints each run's wall time, peak RSS and peak anonymous memory (RssAnon,
sampled every millisecond from this process).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.vs_builder import run  # noqa: E402
from mtpc.graphs.parameters import STREAM_BYTES  # noqa: E402
from mtpc.ir import LayerKind, MoeDims  # noqa: E402
from mtpc.weights import canonical_shapes  # noqa: E402
from tests.fixtures.moe_checkpoints import hf_expert_names, moe_text_config, tiny_moe_arch  # noqa: E402
from tests.fixtures.safetensors_writer import write_sparse_safetensors  # noqa: E402

QUANTIZATIONS = {"float16 MoE": "precision: {io_dtype: float16}\n",
                 "int4 QMoE": "quantization:\n  default: {bits: 4, block_size: 32}\n"}
CHILD = ("import sys\nfrom mtpc.graphs import parameters\nparameters.STREAM_BYTES = int(sys.argv[1])\n"
         "from mtpc.cli.main import main\nsys.exit(main(sys.argv[2:]))\n")


def architecture():
    layers = (LayerKind.LINEAR_ATTENTION, LayerKind.FULL_ATTENTION)
    moe = MoeDims(num_experts=256, top_k=8, expert_intermediate_size=512, shared_expert_intermediate_size=512)
    return replace(tiny_moe_arch(mtp_num_layers=0), hidden_size=2048, layer_kinds=layers, moe=moe)


def write_sparse_checkpoint(folder: Path, arch) -> int:
    """config.json and a model.safetensors whose data is a hole; returns the data's bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
              "text_config": moe_text_config(arch, with_mtp=False), "tie_word_embeddings": False}
    (folder / "config.json").write_text(json.dumps(config))
    shapes = dict(hf for canonical, shape in canonical_shapes(arch).items()
                  for hf in hf_expert_names(canonical, shape, fused=canonical.startswith("layers.0.")))
    return write_sparse_safetensors(folder / "model.safetensors", shapes)


def measure(spec: Path, out: Path, stream_bytes: int, jobs: int) -> dict:
    return run([sys.executable, "-c", CHILD, str(stream_bytes), "compile", str(spec), "-o", str(out), "--force",
                "-q", "--jobs", str(jobs)], cwd=REPO)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, help="work folder (default: a temporary one, deleted)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        work = Path(tmp)
        arch = architecture()
        data = write_sparse_checkpoint(work / "ckpt", arch)
        print(f"checkpoint: {data / 2**30:.2f} GiB of bf16 data (a hole), 2 layers x 256 experts x 2048 x 512")
        print(f"{'quantization':<14} {'experts':<8} {'wall s':>7} {'peak RSS MiB':>13} {'peak anon MiB':>14}")
        for label, rest in QUANTIZATIONS.items():
            spec = work / f"{label.split()[0]}.yaml"
            spec.write_text(f"mtpc: 1\nname: moe-layer\nsource: {{hf: ckpt}}\n{rest}"
                            'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu}\n')
            for _ in range(args.repeat):
                for mode, stream_bytes in (("slabs", STREAM_BYTES), ("whole", 1 << 60)):  # interleaved A/B
                    row = measure(spec, work / "out", stream_bytes, args.jobs)
                    print(f"{label:<14} {mode:<8} {row['wall_s']:>7.1f} {row['peak_rss'] / 2**20:>13.0f} "
                          f"{row['peak_anon'] / 2**20:>14.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
