"""mtpc against the real competitors, measured in one run: one table of ratios.

    pip install -e '.[bench]'
    python bench/vs_builder.py [--size medium] [--json FILE] [--with-27b] [--only compile|27b|verbs] [--gguf-27b FILE]

Competitors: onnxruntime-genai 0.18.0's model builder (`onnxruntime_genai.models.builder`, from
its wheel; needs torch and transformers) on the same Hugging Face checkpoint, and llama.cpp's
own decode (`llama-bench -p 0 -n 128`, built once from the llama-cpp-python 0.3.36 sdist by
bench/llama_bench_build.py and cached outside the repository) on the same GGUF files.

1. A seeded Qwen3.5 checkpoint with an MTP head is written as bfloat16 safetensors with a
   tiny byte-level tokenizer (`compile_bench.SIZES`; the default `medium` is 156M parameters).
2. Compile, each in a fresh process timed from outside with its peak RSS sampled from /proc:
   `mtpc compile` and the builder, at fp32 and int4 (block 32, each tool's CPU defaults),
   and `cp -r CHECKPOINT && sync` as the disk floor.
3. Decode tok/s in onnxruntime-genai (128 greedy steps after an 8-token prompt and a 16-step
   warm-up, best of 2, `intra_op_num_threads` 1 and 2) of each package. mtpc's and the builder's
   package run alternately in fresh processes, `--decode-repeats` times (default 5), and the
   medians count: on a shared machine a run that waited for a core is an outlier, not a verdict.
   Tokens per CPU-second (user + system time of the decoding process) are printed beside the
   table: what the kernels cost, whatever the other jobs on the machine did.
4. llama.cpp's converter writes a Q8_0 and a BF16 GGUF of the same checkpoint; llama-quantize
   makes Q4_0 from the BF16 one. mtpc compiles each with `keep: source`; og's decode of those
   packages against `llama-bench -p 0 -n 128 -t 1,2` on the very same files, alternating the
   same way (llama-bench's own mean of its repetitions per run, then the median of the runs).
5. Metadata verbs (`--help`, `inspect`, `check SPEC`, `plan`, `diff SPEC SPEC`) on a 27B-shaped
   sparse GGUF and HF folder (bench/metadata_verbs.py; bench/sparse_source.py: real headers and
   vocabulary, no weights).
6. `--with-27b`: that GGUF written dense (~17 GB of real bytes), compiled with keep: source,
   against `cp && sync` of the file, with peak anonymous memory.

Every number comes from this run on this machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compile_bench import SIZES, architecture, sampled, tree_bytes  # noqa: E402

PY = sys.executable
DECODE_STEPS = 128
PROMPT = list(range(10, 18))
THREADS = (1, 2)
INT4 = "quantization:\n  default: {bits: 4, block_size: 32}\n"
KEEP = "quantization:\n  default: {keep: source}\n"


# ----------------------------------------------------------------------------- measuring a process


def run(argv: list[str], *, ok: tuple[int, ...] = (0,), env: dict | None = None, cwd: Path | None = None) -> dict:
    """Wall seconds, peak RSS (highest VmHWM seen) and peak anonymous memory of a command's process."""
    done, peaks = sampled(argv, env=env, cwd=cwd)
    if done.returncode not in ok:
        raise SystemExit(f"failed (exit {done.returncode}): {' '.join(map(str, argv))}\n{done.stderr[-4000:]}")
    return {**peaks, "stdout": done.stdout}


# ----------------------------------------------------------------------------- inputs


def write_checkpoint(folder: Path, size: str) -> Path:
    from mtpc.emit.tokenizer import synthetic_tokenizer_files
    from tests.fixtures.checkpoints import write_hf_checkpoint

    arch = architecture(size)
    ckpt = write_hf_checkpoint(folder / "checkpoint", arch, seed=0, float_dtype="BF16")
    for relpath, content in synthetic_tokenizer_files(arch):
        (ckpt / relpath).write_bytes(content)
    _add_a_merge(ckpt / "tokenizer.json")
    return ckpt


def _add_a_merge(path: Path) -> None:
    """llama.cpp loads a BPE vocabulary only with merges: the first spare special token becomes "ab" = "a" + "b"."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    vocab, added = doc["model"]["vocab"], doc["added_tokens"]
    spare = next(t for t in added if t["content"].startswith("<|extra_"))
    del vocab[spare["content"]]
    vocab["ab"] = spare["id"]
    added.remove(spare)
    doc["model"]["merges"] = ["a b"]
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def spec(folder: Path, name: str, source: str, quantization: str = "") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"mtpc: 1\nname: {name}\nsource: {source}\n{quantization}"
        "targets:\n  onnxruntime_genai: {execution_provider: cpu}\n"
    )
    return path


def gguf_files(folder: Path, ckpt: Path) -> dict[str, Path]:
    """Q8_0 from llama.cpp's converter; Q4_0 by llama-quantize from its BF16 output."""
    from bench.llama_bench_build import llama_tools
    from tests.clients import llama_cpp

    out = {"Q8_0": folder / "model-q8_0.gguf", "BF16": folder / "model-bf16.gguf"}
    llama_cpp.convert(ckpt, {"q8_0": out["Q8_0"], "bf16": out["BF16"]})
    out["Q4_0"] = folder / "model-q4_0.gguf"
    run([str(llama_tools()["llama-quantize"]), str(out["BF16"]), str(out["Q4_0"]), "Q4_0"])
    out.pop("BF16").unlink()
    return out


# ----------------------------------------------------------------------------- decoding


def decode_child(package: Path, threads: int) -> None:
    """Prints the tok/s of 128 greedy decode steps in onnxruntime-genai (run as `--decode PKG N`), and
    tokens per CPU-second of this process over the same steps."""
    import resource

    import onnxruntime_genai as og

    config = package / "genai_config.json"
    doc = json.loads(config.read_text())
    options = doc["model"]["decoder"].setdefault("session_options", {})
    options.update(intra_op_num_threads=threads, inter_op_num_threads=1)
    # The builder's packages list `shared_initializers`, which onnxruntime-genai 0.18.0 on CPU cannot
    # load ("GetMemoryInfo for CPU should not be used"); the graphs hold those tensors themselves.
    for section in (doc["model"]["decoder"], doc["model"].get("mtp") or {}):
        section.pop("shared_initializers", None)
    config.write_text(json.dumps(doc, indent=4))
    model = og.Model(str(package))

    def cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    best = best_cpu = 0.0
    for steps in (16, DECODE_STEPS, DECODE_STEPS):  # the first, short, warms the arena and the caches up
        params = og.GeneratorParams(model)
        length = len(PROMPT) + steps + 1
        params.set_search_options(do_sample=False, max_length=length, min_length=length)
        generator = og.Generator(model, params)
        generator.append_tokens(PROMPT)
        cpu, start = cpu_s(), time.perf_counter()
        for _ in range(steps):
            generator.generate_next_token()
        wall, cpu = time.perf_counter() - start, cpu_s() - cpu
        if steps == DECODE_STEPS:
            best, best_cpu = max(best, steps / wall), max(best_cpu, steps / cpu)
    print(json.dumps({"tok_s": best, "tok_cpu_s": best_cpu}))


def og_decode(package: Path, threads: int) -> dict[str, float]:
    """{"tok_s": wall tok/s, "tok_cpu_s": tokens per CPU-second} of a fresh decoding process."""
    return json.loads(run([PY, __file__, "--decode", str(package), str(threads)])["stdout"].strip().splitlines()[-1])


def llama_decode(gguf: Path) -> dict[int, float]:
    from bench.llama_bench_build import llama_bench

    argv = [str(llama_bench()), "-m", str(gguf), "-p", "0", "-n", str(DECODE_STEPS), "-t", ",".join(map(str, THREADS)),
            "-o", "json"]
    rows = json.loads(run(argv)["stdout"])
    return {int(r["n_threads"]): float(r["avg_ts"]) for r in rows}


def alternating(ours, theirs, repeats: int) -> tuple[list, list]:
    """`repeats` results of each of two measurements, run turn about (who goes first alternates too),
    so a busy spell on the machine falls on both."""
    a, b = [], []
    for i in range(repeats):
        if i % 2:
            b.append(theirs()); a.append(ours())
        else:
            a.append(ours()); b.append(theirs())
    return a, b


# ----------------------------------------------------------------------------- the run


def copy_floor(source: Path, work: Path) -> dict:
    """`cp -r SOURCE && sync`: what moving those bytes through the disk costs."""
    copy = work / "copy"
    floor = run(["sh", "-c", f"cp -r '{source}' '{copy}' && sync"])
    shutil.rmtree(copy) if copy.is_dir() else copy.unlink()
    return floor


def compile_rows(work: Path, ckpt: Path) -> tuple[dict, dict, dict]:
    """Compile measurements, packages (for decoding) and the cp floor."""
    measured, packages = {}, {}
    floor = copy_floor(ckpt, work)
    for label, quant, precision in (("fp32", "", "fp32"), ("int4", INT4, "int4")):
        s = spec(work, f"mtpc-{label}", "{hf: checkpoint}", quant)
        out = work / f"mtpc-{label}"
        print(f"compiling {label} with mtpc", file=sys.stderr)
        measured[("mtpc", label)] = run([PY, "-m", "mtpc", "compile", str(s), "-o", str(out), "-q"])
        measured[("mtpc", label)]["bytes"] = tree_bytes(out)
        # The same number of bytes as the package written (and synced): the floor for what compile writes.
        measured[("mtpc", label)]["write_floor_s"] = copy_floor(out, work)["wall_s"]
        packages[("mtpc", label)] = out
        out = work / f"builder-{label}"
        print(f"compiling {label} with the 0.18.0 builder", file=sys.stderr)
        measured[("builder", label)] = run([PY, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                                            "-p", precision, "-e", "cpu", "-c", str(work / "builder-cache")])
        measured[("builder", label)]["bytes"] = tree_bytes(out)
        packages[("builder", label)] = out
    return measured, packages, floor


def metadata_times(work: Path) -> dict[str, float]:
    """`mtpc --help` and the metadata verbs on the 27B-shaped GGUF and HF folder (bench/metadata_verbs.py:
    the issue-22 spec, int4 with float embedding / LM head / mtp.fc, float16 I/O, both targets), medians."""
    from bench.metadata_verbs import medians

    folder = work / "verbs"
    folder.mkdir()
    return medians(folder)


def big_compile(work: Path, gguf: Path | None = None) -> dict:
    """The dense 27B-shaped Q4_0 GGUF (written here unless `gguf` names one already written, which is
    kept) compiled with keep: source, against `cp FILE && sync`."""
    from bench.sparse_source import architecture_27b, write

    written = gguf is None
    if written:
        gguf = write(work / "q27-dense.gguf", architecture_27b(), dense=True)
    size = gguf.stat().st_size
    floor = run(["sh", "-c", f"cp '{gguf}' '{work / 'q27-copy.gguf'}' && sync"])
    (work / "q27-copy.gguf").unlink()
    s = spec(gguf.parent if not written else work, "q27-keep", f"{{gguf: {gguf.name}}}", KEEP)
    out = work / "q27-pkg"
    compiled = run([PY, "-m", "mtpc", "compile", str(s), "-o", str(out), "-q"])
    package = tree_bytes(out)
    synced = run(["sync"])["wall_s"]  # what the compile left for the disk to write
    shutil.rmtree(out)
    s.unlink()
    if written:
        gguf.unlink()
    return {"copy_s": floor["wall_s"], "compile_s": compiled["wall_s"], "sync_after_s": synced,
            "peak_anon": compiled["peak_anon"], "peak_rss": compiled["peak_rss"], "gguf_bytes": size,
            "package_bytes": package}


def table(results: dict) -> str:
    rows = []

    def add(name: str, ratio: float | None, goal: str, ok: bool | None) -> None:
        verdict = "" if ok is None else ("met" if ok else "missed")
        rows.append(f"| {name} | {'' if ratio is None else f'{ratio:.2f}'} | {goal} | {verdict} |")

    m = results.get("compile")
    for label in ("fp32", "int4") if m else ():
        r = m[("mtpc", label)]["wall_s"] / m[("builder", label)]["wall_s"]
        add(f"compile wall {label}, mtpc / builder", r, "<= 0.40", r <= 0.4)
    if m:
        r = m[("mtpc", "fp32")]["wall_s"] / results["copy_s"]
        add("compile wall fp32, mtpc / `cp -r && sync`", r, "<= 2.0", r <= 2.0)
        if "write_floor_s" in m[("mtpc", "fp32")]:
            r = m[("mtpc", "fp32")]["wall_s"] / m[("mtpc", "fp32")]["write_floor_s"]
            add("compile wall fp32, mtpc / `cp -r && sync` of its own package (the bytes it writes)", r, "", None)
    for label in ("fp32", "int4") if m else ():
        r = m[("mtpc", label)]["peak_rss"] / m[("builder", label)]["peak_rss"]
        add(f"compile peak RSS {label}, mtpc / builder", r, "<= 0.40", r <= 0.4)
    for label in ("fp32", "int4") if m else ():
        r = m[("mtpc", label)]["bytes"] / m[("builder", label)]["bytes"]
        add(f"package bytes {label}, mtpc / builder", r, "<= 1.01", r <= 1.01)
    for (label, threads), (ours, theirs) in sorted(results.get("decode", {}).items()):
        add(f"decode tok/s {label}, {threads} thread{'s' * (threads > 1)}, mtpc / builder", ours / theirs, ">= 1.0",
            ours >= theirs)
    for (qtype, threads), (ours, theirs) in sorted(results.get("llama", {}).items()):
        add(f"decode tok/s {qtype} GGUF, {threads} thread{'s' * (threads > 1)}, mtpc (og) / llama.cpp", ours / theirs,
            ">= 1.0", ours >= theirs)
    lines = ["| measure | ratio | goal | |", "|---|---:|---|---|", *rows] if rows else []
    if m:
        lines += ["", "| compile (absolute) | wall s | peak RSS MiB | package MiB |", "|---|---:|---:|---:|",
                  f"| `cp -r && sync` of the checkpoint | {results['copy_s']:.2f} | | |"]
        for (tool, label), r in sorted(m.items()):
            lines.append(f"| {tool} {label} | {r['wall_s']:.2f} | {r['peak_rss'] / 2**20:.0f} | {r['bytes'] / 2**20:.0f} |")
    if "verbs" in results:
        lines += ["", "| metadata verb (27B-shaped sparse source) | seconds | goal | |", "|---|---:|---|---|"]
    for verb, seconds in results.get("verbs", {}).items():
        goal = 0.15 if verb == "mtpc --help" else 0.3
        lines.append(f"| {verb} | {seconds:.2f} | <= {goal} | {'met' if seconds <= goal else 'missed'} |")
    if "big" in results:
        big = results["big"]
        r = big["compile_s"] / big["copy_s"]
        lines += ["", "| 27B-shaped Q4_0 GGUF, keep: source | value | goal | |", "|---|---:|---|---|",
                  f"| compile / `cp && sync` | {r:.2f} | <= 2.0 | {'met' if r <= 2 else 'missed'} |",
                  f"| peak anonymous memory GiB | {big['peak_anon'] / 2**30:.2f} | <= 1.0 | "
                  f"{'met' if big['peak_anon'] <= 2**30 else 'missed'} |",
                  f"| (compile + the `sync` after it) / `cp && sync` | {(big['compile_s'] + big['sync_after_s']) / big['copy_s']:.2f} | | |",
                  "", f"27B absolute: `cp && sync` {big['copy_s']:.1f} s of {big['gguf_bytes'] / 1e9:.1f} GB; compile "
                  f"{big['compile_s']:.1f} s writing {big['package_bytes'] / 1e9:.1f} GB, then `sync` {big['sync_after_s']:.1f} s; "
                  f"peak RSS {big['peak_rss'] / 2**30:.2f} GiB"]
    return "\n".join(lines)


def cpu_table(decode_cpu: dict) -> str:
    lines = ["| package | threads | mtpc | builder | mtpc / builder |", "|---|---:|---:|---:|---:|"]
    for (label, threads), (ours, theirs) in sorted(decode_cpu.items()):
        lines.append(f"| {label} | {threads} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="medium")
    parser.add_argument("--with-27b", action="store_true", help="also compile a dense 27B-shaped Q4_0 GGUF (~17 GB)")
    parser.add_argument("--only", choices=("compile", "27b", "verbs"),
                        help="run only the compile rows (mtpc and the builder, fp32 and int4, and the cp floors), "
                             "only the 27B-shaped compile, or only the metadata verbs")
    parser.add_argument("--gguf-27b", type=Path, metavar="FILE",
                        help="with --with-27b / --only 27b: a dense GGUF `sparse_source.py FILE --dense` wrote (kept)")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    parser.add_argument("--decode-repeats", type=int, default=5, metavar="N",
                        help="decode runs of each package, alternating, medians count (default 5)")
    parser.add_argument("--decode", nargs=2, metavar=("PACKAGE", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.decode:
        decode_child(Path(args.decode[0]), int(args.decode[1]))
        return 0
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="mtpc-vs-") as tmp:
        work = Path(tmp)
        if args.only == "27b":
            results["big"] = big_compile(work, args.gguf_27b)
            return _report(args, results)
        if args.only == "verbs":
            results["verbs"] = metadata_times(work)
            return _report(args, results)
        print(f"writing the {args.size} checkpoint", file=sys.stderr)
        ckpt = write_checkpoint(work, args.size)
        results["compile"], packages, floor = compile_rows(work, ckpt)
        results["copy_s"] = floor["wall_s"]
        if args.only == "compile":
            return _report(args, results)
        results["decode"], results["decode_cpu"] = {}, {}
        for label in ("fp32", "int4"):
            for threads in THREADS:
                print(f"decoding {label} at {threads} threads", file=sys.stderr)
                ours, theirs = alternating(lambda: og_decode(packages[("mtpc", label)], threads),
                                           lambda: og_decode(packages[("builder", label)], threads), args.decode_repeats)
                results["decode"][(label, threads)] = (median(r["tok_s"] for r in ours),
                                                       median(r["tok_s"] for r in theirs))
                results["decode_cpu"][(label, threads)] = (median(r["tok_cpu_s"] for r in ours),
                                                           median(r["tok_cpu_s"] for r in theirs))
        for package in packages.values():
            shutil.rmtree(package)
        print("metadata verbs on the 27B-shaped sparse GGUF and HF folder", file=sys.stderr)
        results["verbs"] = metadata_times(work)
        print("llama.cpp: converting, quantizing, decoding", file=sys.stderr)
        results["llama"] = {}
        try:  # a failure here (llama.cpp refusing a file) still prints everything measured before it
            for qtype, gguf in gguf_files(work, ckpt).items():
                out = work / f"gguf-{qtype}"
                run([PY, "-m", "mtpc", "compile", str(spec(work, f"gguf-{qtype}", f"{{gguf: {gguf.name}}}", KEEP)),
                     "-o", str(out), "-q"])
                ours, theirs = alternating(lambda: {t: og_decode(out, t)["tok_s"] for t in THREADS},
                                           lambda: llama_decode(gguf), args.decode_repeats)
                for threads in THREADS:
                    results["llama"][(qtype, threads)] = (median(r[threads] for r in ours),
                                                          median(r[threads] for r in theirs))
                shutil.rmtree(out)
            if args.with_27b:
                print("27B-shaped dense Q4_0 GGUF: writing, copying, compiling", file=sys.stderr)
                results["big"] = big_compile(work, args.gguf_27b)
        except SystemExit as failure:
            results["failed"] = str(failure)
    return _report(args, results)


def _report(args, results: dict) -> int:
    print(f"mtpc vs onnxruntime-genai 0.18.0's builder and llama.cpp, size {args.size}, "
          f"{os.cpu_count()} cores; one run, every ratio measured in it")
    print(table(results))
    if results.get("decode_cpu"):
        print(f"\ntokens per CPU-second (medians of {args.decode_repeats}; not a goal: the kernels' cost without the "
              "waits for a core)\n")
        print(cpu_table(results["decode_cpu"]))
    if "failed" in results:
        print(f"\nnot measured, a step failed: {results['failed']}")
    if args.json:
        flat = {k: {" ".join(map(str, key)) if isinstance(key, tuple) else key: value for key, value in v.items()}
                if isinstance(v, dict) else v for k, v in results.items()}
        Path(args.json).write_text(json.dumps(flat, indent=2, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
