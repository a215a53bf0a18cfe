"""What the state window costs plain decoding, W by W, against the 0.18.0 model builder's package.

    .venv/bin/python bench/window_cost.py [--size mtp] [--windows off,2,3,5] [--threads 1] [--repeats 5]
                                          [--precisions fp32,int4] [--work DIR] [--json FILE]

A windowed package (`state_window: W`) writes W linear-attention states per layer in every
forward, the one-token forwards of plain decoding included, so a user who decodes without the
head pays for it too. This measures that price: vs_builder.py's seeded bfloat16 checkpoint
(`--size mtp`: the 348M class of bench/mtp_speedup.py), compiled by mtpc with each state window
(`off`: none) and by onnxruntime-genai 0.18.0's builder (`-p fp32|int4 -e cpu`), each package
decoded plainly (128 greedy steps after a 16-step warm-up, vs_builder.py's `--decode` child: a fresh
process per measurement) at `--threads`, all packages of a precision interleaved `--repeats` times,
medians. int4 is mtpc's CPU default (blocks of 32, accuracy level 4) and the builder's `-p int4`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.decode_runs import interleaved  # noqa: E402
from bench.vs_builder import INT4, PY, og_decode, run, write_checkpoint  # noqa: E402


def mtpc_package(work: Path, precision: str, window: str) -> Path:
    out = work / f"mtpc-{precision}-w{window}"
    if not (out / "genai_config.json").is_file():
        spec = work / f"mtpc-{precision}-w{window}.yaml"
        drafts = int(window) - 1 if window.isdigit() else 4  # the runtime drafts at most W - 1 tokens
        spec.write_text(f"mtpc: 1\nname: w{window}\nsource: {{hf: checkpoint}}\n{INT4 if precision == 'int4' else ''}"
                        f"targets:\n  onnxruntime_genai: {{execution_provider: cpu, state_window: {window}, "
                        f"max_draft_tokens: {drafts}}}\n")
        print(f"compiling {precision} W = {window} with mtpc", file=sys.stderr, flush=True)
        run([PY, "-m", "mtpc", "compile", str(spec), "-o", str(out), "-q"])
    return out


def builder_package(work: Path, ckpt: Path, precision: str) -> Path:
    out = work / f"builder-{precision}"
    if not (out / "genai_config.json").is_file():
        print(f"compiling {precision} with the 0.18.0 builder", file=sys.stderr, flush=True)
        run([PY, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out), "-p", precision,
             "-e", "cpu", "-c", str(work / "builder-cache")])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="mtp")
    parser.add_argument("--windows", default="off,2,3,5")
    parser.add_argument("--precisions", default="fp32,int4")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="mtpc-window-"))
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoint"
    if not (ckpt / "config.json").is_file():
        print(f"writing the {args.size} checkpoint", file=sys.stderr, flush=True)
        write_checkpoint(work, args.size)
    rows = []
    for precision in args.precisions.split(","):
        packages = {f"mtpc W = {w}": mtpc_package(work, precision, w) for w in args.windows.split(",")}
        packages["builder"] = builder_package(work, ckpt, precision)
        print(f"decoding {precision}: {len(packages)} packages x {args.repeats}", file=sys.stderr, flush=True)
        results = interleaved(list(packages), args.repeats, lambda label: og_decode(packages[label], args.threads))
        builder = median(r["tok_s"] for r in results["builder"])
        builder_cpu = median(r["tok_cpu_s"] for r in results["builder"])
        off = median(r["tok_s"] for r in results.get("mtpc W = off", results["builder"]))
        for label, runs in results.items():
            tok_s, tok_cpu_s = median(r["tok_s"] for r in runs), median(r["tok_cpu_s"] for r in runs)
            rows.append({"precision": precision, "package": label, "tok_s": tok_s, "tok_cpu_s": tok_cpu_s,
                         "vs_builder": tok_s / builder, "vs_builder_cpu": tok_cpu_s / builder_cpu,
                         "vs_off": tok_s / off})
    lines = ["| precision | package | tok/s | tok/CPU-s | x builder | x builder (CPU) | x unwindowed |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['precision']} | {r['package']} | {r['tok_s']:.1f} | {r['tok_cpu_s']:.1f} | "
                     f"{r['vs_builder']:.2f} | {r['vs_builder_cpu']:.2f} | {r['vs_off']:.2f} |")
    print("\n".join(lines))
    print(f"\nplain decoding, {args.threads} thread(s), medians of {args.repeats} interleaved fresh processes, "
          f"size {args.size}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
