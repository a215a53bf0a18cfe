"""Speed and memory of `mtpc compile`, as ratios against a reference measured in the same run.

Absolute seconds and megabytes depend on the machine; ratios against a plain
streaming copy of the same weights, measured minutes earlier on the same disk
and CPU, do not (much). So this prints both, and the ratios are what to compare
across machines and commits.

    .venv/bin/python bench/compile_bench.py --size small
    .venv/bin/python bench/compile_bench.py --size medium --json medium.json

Steps:
1. Write a synthetic Qwen3.5 checkpoint with an MTP head (HF safetensors,
   float32) of the chosen size, and two specs pointing at it (float, int4).
2. Run each measurement in a fresh Python process:
   - `import`: imports mtpc, numpy and onnx and nothing else (the baseline RSS);
   - `copy`: reads every tensor with mtpc's safetensors reader and writes them
     all to one file (the reference: what moving the bytes costs);
   - `compile float32` / `compile int4`: `mtpc.pipeline.driver.build` then
     `mtpc.output.write.write_package`, as `mtpc compile` does.
3. Print a table and the ratios (optionally also as JSON).

Peak RSS is the child's own `VmHWM` (/proc/self/status), not
`getrusage(RUSAGE_CHILDREN).ru_maxrss`: on Linux the latter is a maximum over
all waited children, and even per child (`os.wait4`) it includes the parent's
RSS at spawn, because exec records the old address space's high-water mark.
Memory-mapped checkpoint pages count in RSS but are reclaimable page cache, so
the peak of the child's `RssAnon`, sampled by this process every millisecond,
is reported as well: that is the memory the process really needs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests.fixtures writes the checkpoint

# name: (hidden, layers, vocab, intermediate, heads, kv heads, head_dim, mrope_section,
#        linear key heads, linear value heads, linear head dim)
SIZES = {
    # 8.7 MiB: a smoke run that finishes in seconds.
    "small": (128, 4, 4096, 384, 4, 2, 64, (3, 3, 2), 2, 4, 32),
    # 597.5 MiB of float32 weights; the largest tensor (lm_head) is 125 MiB.
    "medium": (1024, 6, 32000, 2816, 8, 2, 128, (6, 5, 5), 4, 8, 128),
    # 1.8 GiB; lm_head 281 MiB.
    "large": (1536, 12, 48000, 4096, 12, 2, 128, (6, 5, 5), 4, 8, 128),
    # The 348M class of issue 20's speculative measurements (bench/mtp_speedup.py): 16 layers,
    # vocabulary 32k, 351M parameters with the MTP head (332M without); 1.3 GiB of float32.
    "mtp": (1024, 16, 32000, 4096, 8, 2, 128, (6, 5, 5), 4, 8, 128),
}

SPEC = """\
mtpc: 1
name: bench-{size}-{label}
source: {{hf: checkpoint}}
quantization:
  default: {{bits: {bits}}}
  # onnx-genai's MTP sidecar borrows the LM head by name, which must then be float.
  overrides: [{{match: lm_head.weight, bits: null}}]
"""
QUANTIZATIONS = {"float32": "null", "int4": "4"}
SAMPLE_INTERVAL_S = 0.001


def architecture(size: str):
    from mtpc.ir import Architecture, LayerKind, LinearAttentionDims, Rope, TokenIds

    hidden, layers, vocab, inter, heads, kv, head_dim, mrope, lk, lv, lhd = SIZES[size]
    full, linear = LayerKind.FULL_ATTENTION, LayerKind.LINEAR_ATTENTION
    return Architecture(
        family="qwen35",
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        vocab_size=vocab,
        # Qwen3.5's pattern: three linear-attention layers, then one full-attention layer.
        layer_kinds=tuple(full if (i + 1) % 4 == 0 else linear for i in range(layers)),
        rms_norm_eps=1e-6,
        rope=Rope(theta=10000000.0, partial_rotary_factor=0.25, head_dim=head_dim, mrope_section=mrope),
        context_length=4096,
        tokens=TokenIds(bos=1, eos=(2,), pad=0),
        linear_attention=LinearAttentionDims(
            num_key_heads=lk, key_head_dim=lhd, num_value_heads=lv, value_head_dim=lhd, conv_kernel=4
        ),
        tie_word_embeddings=False,
        mtp_num_layers=1,
    )


@dataclass(frozen=True)
class WeightStats:
    tensors: int
    total_bytes: int
    largest_name: str
    largest_bytes: int


def weight_stats(checkpoint: Path) -> WeightStats:
    from mtpc.sources.hf.safetensors import SafetensorsFile

    sizes: dict[str, int] = {}
    for path in sorted(checkpoint.glob("*.safetensors")):
        st = SafetensorsFile(path)
        for name in st.names():
            sizes[name] = st.read(name).nbytes  # a memory-map view: no data is read
    largest = max(sorted(sizes), key=sizes.__getitem__)
    return WeightStats(len(sizes), sum(sizes.values()), largest, sizes[largest])


def write_inputs(workdir: Path, size: str) -> dict[str, Path]:
    """The checkpoint and one spec per quantization; returns label -> spec path."""
    from tests.fixtures.checkpoints import write_hf_checkpoint

    # With a tokenizer: the specs build both targets, and onnx-genai refuses a package without tokenizer.json.
    write_hf_checkpoint(workdir / "checkpoint", architecture(size), seed=0, tokenizer=True)
    specs = {}
    for label, bits in QUANTIZATIONS.items():
        spec = workdir / f"{label}.yaml"
        spec.write_text(SPEC.format(size=size, label=label, bits=bits))
        specs[label] = spec
    return specs


# ----------------------------------------------------------------------------- children


def _status_bytes(pid: int | str, field: str) -> int | None:
    """A memory field of /proc/PID/status; None once the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except FileNotFoundError:
        pass
    return None


def _import_baseline() -> None:
    import numpy  # noqa: F401
    import onnx  # noqa: F401

    import mtpc.pipeline.driver  # noqa: F401
    import mtpc.output.write  # noqa: F401
    from mtpc.emit import genai_config, inference_metadata, model_card, onnx_graphs, tokenizer  # noqa: F401


def _copy(checkpoint: Path, target: Path) -> None:
    from mtpc.sources.hf.safetensors import SafetensorsFile

    with open(target, "wb") as out:
        for path in sorted(checkpoint.glob("*.safetensors")):
            st = SafetensorsFile(path)
            for name in st.names():
                out.write(st.read(name).data)
            st.close()


def _compile(spec: Path, target: Path) -> None:
    from mtpc.pipeline.driver import build
    from mtpc.output.write import write_package

    write_package(build(spec).artifacts, target)


def child_main(kind: str, source: Path, target: Path) -> None:
    _import_baseline()
    work = {"import": lambda: None, "copy": lambda: _copy(source, target), "compile": lambda: _compile(source, target)}
    start = time.perf_counter()
    work[kind]()
    seconds = time.perf_counter() - start
    print(json.dumps({"work_s": seconds, "peak_rss_bytes": _status_bytes("self", "VmHWM")}))


# ----------------------------------------------------------------------------- parent


@dataclass
class Row:
    name: str
    work_s: float
    process_s: float
    peak_rss_bytes: int
    peak_anon_bytes: int
    output_bytes: int


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def sampled(argv: list, *, env: dict | None = None, cwd: Path | None = REPO) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a command to its end; (its exit code and output, {"wall_s", "peak_rss" (highest VmHWM seen),
    "peak_anon" (highest RssAnon seen)}).

    Sampled from here, not from a thread in the child: a thread there needs the GIL, which numpy holds
    through the very copies whose peak we want to see. The child writes to files: a pipe nobody reads until
    it exits blocks a child that prints more than 64 KiB (the 0.18.0 builder's int4 progress bars did).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env, cwd=cwd)
        peak_rss = peak_anon = 0
        while child.poll() is None:
            peak_rss = max(peak_rss, _status_bytes(child.pid, "VmHWM") or 0)
            peak_anon = max(peak_anon, _status_bytes(child.pid, "RssAnon") or 0)
            time.sleep(SAMPLE_INTERVAL_S)
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        done = subprocess.CompletedProcess(argv, child.returncode, out.read(), err.read())
    return done, {"wall_s": wall, "peak_rss": peak_rss, "peak_anon": peak_anon}


def run_sampled(name: str, command: list[str]) -> tuple[dict, int]:
    """Run a child that prints one JSON line last; (that line, the child's highest RssAnon in bytes)."""
    done, peaks = sampled(command)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1]), peaks["peak_anon"]


def measure(name: str, kind: str, source: Path, target: Path) -> Row:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(source), str(target)]
    start = time.perf_counter()
    result, peak_anon = run_sampled(name, command)
    process_s = time.perf_counter() - start
    output = tree_bytes(target) if target.exists() else 0
    return Row(name, result["work_s"], process_s, result["peak_rss_bytes"], peak_anon, output)


def best_of(repeat: int, name: str, kind: str, source: Path, target: Path) -> Row:
    """Fastest of `repeat` runs for time; highest of them for memory."""
    rows = [measure(name, kind, source, target) for _ in range(repeat)]
    fastest = min(rows, key=lambda r: r.work_s)
    fastest.peak_rss_bytes = max(r.peak_rss_bytes for r in rows)
    fastest.peak_anon_bytes = max(r.peak_anon_bytes for r in rows)
    return fastest


def ratios(rows: dict[str, Row], stats: WeightStats) -> list[tuple[str, float]]:
    """Time against the copy; memory above the import baseline against the largest tensor and the whole model."""
    base, copy = rows["import"], rows["copy"]
    out = [
        (f"compile {label}: time / copy time", rows[f"compile {label}"].work_s / copy.work_s) for label in QUANTIZATIONS
    ]
    for name, row in rows.items():
        if name == "import":
            continue
        for what, peak, floor in (
            ("peak RSS", row.peak_rss_bytes, base.peak_rss_bytes),
            ("peak anon", row.peak_anon_bytes, base.peak_anon_bytes),
        ):
            out.append((f"{name}: {what} - import / largest tensor", (peak - floor) / stats.largest_bytes))
            out.append((f"{name}: {what} - import / total weights", (peak - floor) / stats.total_bytes))
    return out


def mib(n: int) -> str:
    return f"{n / 2**20:9.1f}"


def report(size: str, stats: WeightStats, rows: dict[str, Row], ratio_rows: list[tuple[str, float]]) -> str:
    lines = [
        f"mtpc compile bench, size {size}: {stats.tensors} tensors, {stats.total_bytes / 2**20:.1f} MiB float32, "
        f"largest {stats.largest_name} {stats.largest_bytes / 2**20:.1f} MiB",
        "",
        f"{'run':<18}{'work s':>9}{'process s':>11}{'peak RSS MiB':>14}{'peak anon MiB':>15}{'output MiB':>12}",
    ]
    for row in rows.values():
        lines.append(
            f"{row.name:<18}{row.work_s:9.2f}{row.process_s:11.2f}{mib(row.peak_rss_bytes):>14}"
            f"{mib(row.peak_anon_bytes):>15}{mib(row.output_bytes):>12}"
        )
    lines += ["", "ratios"]
    width = max(len(name) for name, _ in ratio_rows)
    lines += [f"  {name:<{width}}  {value:7.2f}" for name, value in ratio_rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="medium")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest counts")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "SOURCE", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, source, target = args.child
        child_main(kind, Path(source), Path(target))
        return 0
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="mtpc-bench-") as tmp:
        workdir = Path(tmp)
        print(f"writing the {args.size} checkpoint to {workdir}", file=sys.stderr)
        specs = write_inputs(workdir, args.size)
        stats = weight_stats(workdir / "checkpoint")
        plan = [
            ("import", "import", workdir, workdir / "none"),
            ("copy", "copy", workdir / "checkpoint", workdir / "copy.bin"),
        ]
        plan += [(f"compile {label}", "compile", spec, workdir / f"pkg-{label}") for label, spec in specs.items()]
        rows: dict[str, Row] = {}
        for name, kind, source, target in plan:
            print(f"measuring {name}", file=sys.stderr)
            rows[name] = best_of(args.repeat, name, kind, source, target)
            # Keep disk use to one output at a time.
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    ratio_rows = ratios(rows, stats)
    print(report(args.size, stats, rows, ratio_rows))
    if args.json:
        doc = {
            "size": args.size,
            "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
            "weights": asdict(stats),
            "runs": [asdict(r) for r in rows.values()],
            "ratios": dict(ratio_rows),
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
