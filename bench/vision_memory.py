"""Peak memory of each use of a vision-language package, against the text package of the same weights.

```
.venv/bin/python bench/vision_memory.py [--tokens N] [--json FILE]
```

It builds a mid-size Qwen3.5 vision-language model with transformers from a config (hidden 1024, 4 text
layers, vocabulary 8192, a 6-block tower of hidden 768, its MTP head: about 0.5 GB of float32 weights,
written as transformers' `save_pretrained` plus the head), compiles it twice in float32 with the head: as it
ships (the multimodal pipeline and its text view) and from the same folder without the tower (the text
package, the reference), then runs each use in a fresh process and reports its peak memory:

- `import`: onnxruntime-genai imported, nothing loaded (the baseline subtracted below);
- `text package, MtpGenerator`: the reference: the text package's main model and head, N tokens drafted on a
  64-token prompt;
- `text view, MtpGenerator`: the same on the vision package's text view (`text_overlay.json`);
- `images, Generator`: the vision package's pipeline on one 448 x 448 image (784 patches, 196 image tokens)
  and a short prompt, N greedy tokens.

Memory is each child's `VmHWM` (peak RSS) and its highest `RssAnon`, sampled by this process every
millisecond (compile_bench.py says why both). The ratios compare the memory above the import baseline with
the reference's: the text view should cost what the text package costs (its sessions load the same files),
the pipeline that plus the tower and the decoder on inputs_embeds (a second session over the same weights).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compile_bench import _status_bytes, run_sampled  # noqa: E402

SIZES = (
    ("text", "hidden_size", 1024), ("text", "num_hidden_layers", 4), ("text", "intermediate_size", 2816),
    ("text", "layer_types", ("linear_attention", "linear_attention", "linear_attention", "full_attention")),
    ("text", "full_attention_interval", 4), ("text", "num_attention_heads", 8), ("text", "num_key_value_heads", 2),
    ("text", "head_dim", 128), ("text", "vocab_size", 8192), ("text", "linear_num_key_heads", 8),
    ("text", "linear_key_head_dim", 64), ("text", "linear_num_value_heads", 16), ("text", "linear_value_head_dim", 64),
    ("text", "rope.rope_theta", 1e7), ("text", "rope.partial_rotary_factor", 0.25), ("text", "rope.mrope_section", (6, 5, 5)),
    ("vision", "depth", 6), ("vision", "hidden_size", 768), ("vision", "num_heads", 12),
    ("vision", "intermediate_size", 3072), ("vision", "out_hidden_size", 1024), ("vision", "num_position_embeddings", 2304),
)
SPEC = 'mtpc: 1\nname: {name}\nsource: {{hf: {folder}}}\ntargets:\n  onnxruntime_genai: {{version: "0.18.0", execution_provider: cpu}}\n'


# ----------------------------------------------------------------------------- children


def child_main(kind: str, package: Path, image: Path, tokens: int) -> None:
    import onnxruntime_genai as og

    from mtpc.profiles.ort_genai import text_view_config

    prompt = [(7 * i) % 250 for i in range(64)]
    start = time.perf_counter()
    if kind in ("text", "view"):
        main = og.Model(text_view_config(og, package))
        params = og.GeneratorParams(main)
        params.set_search_options(do_sample=False, max_length=len(prompt) + tokens)
        params.set_speculative_options(max_draft_tokens=2)
        generator = og.MtpGenerator(main, og.Model(str(package / "mtp")), params)
        generator.append_tokens(prompt)
    elif kind == "images":
        model = og.Model(str(package))
        inputs = model.create_multimodal_processor()(
            "Look<|vision_start|><|image_pad|><|vision_end|> at it", images=og.Images.open(str(image)))
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=int(inputs["input_ids"].shape()[1]) + tokens)
        generator = og.Generator(model, params)
        generator.set_inputs(inputs)
    else:
        generator = None
    while generator is not None and not generator.is_done():
        generator.generate_next_token()
    print(json.dumps({"work_s": time.perf_counter() - start, "peak_rss_bytes": _status_bytes("self", "VmHWM")}))


# ----------------------------------------------------------------------------- parent


def measure(kind: str, package: Path, image: Path, tokens: int) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(package), str(image), str(tokens)]
    result, peak_anon = run_sampled(kind, command)
    return {**result, "peak_anon_bytes": peak_anon}


def _bytes(folder: Path, pattern: str = "*") -> int:
    return sum(p.stat().st_size for p in folder.rglob(pattern) if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, package, image, tokens = args.child
        return child_main(kind, Path(package), Path(image), int(tokens))

    from mtpc.output.write import write_package
    from mtpc.pipeline.driver import build
    from tests.fixtures.vision_checkpoints import write_png, write_release

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        packages = {}
        for name, with_vision in (("vision", True), ("text", False)):
            write_release(work / f"hf-{name}", with_vision=with_vision, sizes=SIZES)
            spec = work / f"{name}.yaml"
            spec.write_text(SPEC.format(name=name, folder=f"hf-{name}"))
            write_package(build(spec).artifacts, work / f"pkg-{name}")
            packages[name] = work / f"pkg-{name}"
        image = write_png(work / "image.png", 448, 448, seed=0)
        runs = {"import": ("import", packages["text"]), "text package, MtpGenerator": ("text", packages["text"]),
                "text view, MtpGenerator": ("view", packages["vision"]), "images, Generator": ("images", packages["vision"])}
        rows = {label: measure(kind, package, image, args.tokens) for label, (kind, package) in runs.items()}
        sizes = {"text package data": _bytes(packages["text"], "*.data"),
                 "vision package data": _bytes(packages["vision"], "*.data"),
                 "tower data": _bytes(packages["vision"], "vision.onnx.data")}
    mib = 1 << 20
    base = rows["import"]
    print("| run | work s | peak RSS MiB | peak anon MiB |\n|---|---:|---:|---:|")
    for label, row in rows.items():
        print(f"| {label} | {row['work_s']:.2f} | {row['peak_rss_bytes'] / mib:.1f} | {row['peak_anon_bytes'] / mib:.1f} |")
    reference = rows["text package, MtpGenerator"]
    print("\n| ratio | peak RSS | peak anon |\n|---|---:|---:|")
    for label in ("text view, MtpGenerator", "images, Generator"):
        row = rows[label]
        parts = [(row[k] - base[k]) / (reference[k] - base[k]) for k in ("peak_rss_bytes", "peak_anon_bytes")]
        print(f"| ({label} − import) / (text package − import) | {parts[0]:.2f} | {parts[1]:.2f} |")
    print("\n" + ", ".join(f"{k} {v / mib:.1f} MiB" for k, v in sizes.items()))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "sizes": sizes}, indent=2))


if __name__ == "__main__":
    main()
