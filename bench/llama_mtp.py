"""llama.cpp's MTP path against mtpc's on the same GGUF files: the side-by-side half of mtp_speedup.py.

The best and worst checkpoints of bench/mtp_heads.py go through llama.cpp's own converter (BF16)
and `llama-quantize` (Q4_0, Q8_0). Each file is decoded

- by llama.cpp: plain with `llama-bench -p 0 -n STEPS -t T` (its decode tok/s), speculative with
  `llama-speculative-simple --spec-type draft-mtp --spec-draft-n-max N` (greedy: `--temp 0
  --top-k 1`; its own "decoded ... t/s" and n_drafted / n_accept);
- by onnxruntime-genai: mtpc's `keep: source` package of the very same file, as mtp_speedup.py
  decodes every package.

Each tool's MTP tok/s is divided by its own plain tok/s, so the ratios compare what speculation
buys in each runtime. The tools are built once from the llama-cpp-python sdist
(bench/llama_bench_build.py). llama.cpp's timing is its own (wall time of the decode loop); its
tokens per CPU-second are not reported (the process's CPU time includes loading the model).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from statistics import median

from bench.decode_runs import DRAFTS, PY, interleaved, measure, run

QTYPES = ("Q4_0", "Q8_0")
HEADS = ("best", "worst")
PROMPT_TEXT = "The quick brown fox jumps over the lazy dog"


def gguf_files(work: Path) -> dict[tuple[str, str], Path]:
    """(head, qtype) -> GGUF of that checkpoint, made once under `work/gguf`."""
    from bench.llama_bench_build import llama_tools
    from tests.clients import llama_cpp

    folder = work / "gguf"
    folder.mkdir(exist_ok=True)
    out = {}
    for head in HEADS:
        bf16 = folder / f"{head}-bf16.gguf"
        wanted = {q: folder / f"{head}-{q.lower()}.gguf" for q in QTYPES}
        if not all(p.is_file() for p in wanted.values()):
            print(f"llama.cpp: converting and quantizing the {head} checkpoint", file=sys.stderr, flush=True)
            llama_cpp.convert(work / "checkpoints" / head, {"bf16": bf16})
            for qtype, path in wanted.items():
                run([str(llama_tools()["llama-quantize"]), str(bf16), str(path), qtype])
            bf16.unlink()
        out.update({(head, q): p for q, p in wanted.items()})
    return out


def og_package(work: Path, gguf: Path) -> Path:
    out = work / "packages" / f"gguf-{gguf.stem}"
    if not (out / "genai_config.json").is_file():
        spec = work / f"gguf-{gguf.stem}.yaml"
        spec.write_text(f"mtpc: 1\nname: gguf-{gguf.stem}\nsource: {{gguf: gguf/{gguf.name}}}\n"
                        "quantization:\n  default: {keep: source}\n"
                        "targets:\n  onnxruntime_genai: {execution_provider: cpu, max_draft_tokens: 4}\n")  # DRAFTS: 1..4
        print(f"compiling {spec.name}", file=sys.stderr, flush=True)
        run([PY, "-m", "mtpc", "compile", str(spec), "-o", str(out), "-q"])
    return out


def llama_decode(gguf: Path, threads: int, drafts: int, steps: int) -> dict:
    from bench.llama_bench_build import llama_tools

    tools = llama_tools()
    if drafts == 0:
        argv = [str(tools["llama-bench"]), "-m", str(gguf), "-p", "0", "-n", str(steps), "-t", str(threads),
                "-r", "1", "-o", "json"]
        (row,) = json.loads(run(argv).stdout)
        return {"tok_s": float(row["avg_ts"])}
    argv = [str(tools["llama-speculative-simple"]), "-m", str(gguf), "-p", PROMPT_TEXT, "-n", str(steps),
            "-t", str(threads), "--spec-type", "draft-mtp", "--spec-draft-n-max", str(drafts),
            "--temp", "0", "--top-k", "1", "--seed", "42", "-c", "1024"]
    done = run(argv)
    text = done.stdout + done.stderr
    speed = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", text)
    drafted, accepted = (re.search(rf"{key}\s*=\s*(\d+)", text) for key in ("n_drafted", "n_accept"))
    if not (speed and drafted and accepted):
        raise SystemExit(f"llama-speculative-simple printed no statistics:\n{text[-4000:]}")
    return {"tok_s": float(speed.group(3)), "drafted": int(drafted.group(1)), "accepted": int(accepted.group(1))}


def llama_rows(work: Path, threads_list: list[int], repeats: int, steps: int,
               drafts: tuple[int, ...] = DRAFTS) -> list[dict]:
    from mtpc.tuning.decode import Round, round_acceptance

    files = gguf_files(work)
    packages = {key: og_package(work, path) for key, path in files.items()}
    rows = []
    for qtype in QTYPES:
        for threads in threads_list:
            configs = [(tool, head, n) for head in HEADS for n in (0, *drafts) for tool in ("og", "llama")]
            print(f"{qtype}: og and llama.cpp at {threads} thread(s), {len(configs)} configurations x {repeats}",
                  file=sys.stderr, flush=True)

            def one(config):
                tool, head, n = config
                if tool == "og":
                    return measure(packages[(head, qtype)], threads, n, steps)
                return llama_decode(files[(head, qtype)], threads, n, steps)

            results = interleaved(configs, repeats, one)
            for head in HEADS:
                og_plain = median(r["tok_s"] for r in results[("og", head, 0)])
                llama_plain = median(r["tok_s"] for r in results[("llama", head, 0)])
                for n in drafts:
                    og_runs, llama_runs = results[("og", head, n)], results[("llama", head, n)]
                    og_tok_s, llama_tok_s = median(r["tok_s"] for r in og_runs), median(r["tok_s"] for r in llama_runs)
                    rounds = [Round(d, a, 0.0) for d, a in og_runs[0]["rounds"]]
                    og_accepted = sum(r.accepted for r in rounds) / max(1, sum(r.drafted for r in rounds))
                    first = round_acceptance(rounds, n)[0]
                    rows.append({
                        "qtype": qtype, "threads": threads, "head": head, "drafts": n,
                        "og_plain": og_plain, "og_tok_s": og_tok_s, "og_ratio": og_tok_s / og_plain,
                        "og_accepted": og_accepted, "og_first": first,
                        "llama_plain": llama_plain, "llama_tok_s": llama_tok_s, "llama_ratio": llama_tok_s / llama_plain,
                        "llama_accepted": llama_runs[0]["accepted"] / max(1, llama_runs[0]["drafted"]),
                    })
    return rows


def llama_table(rows: list[dict]) -> str:
    lines = ["| GGUF | threads | head | N | og plain tok/s | og MTP tok/s | og x plain | og drafts accepted "
             "| llama.cpp plain tok/s | llama.cpp MTP tok/s | llama.cpp x plain | llama.cpp drafts accepted |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['qtype']} | {r['threads']} | {r['head']} | {r['drafts']} | {r['og_plain']:.1f} | "
                     f"{r['og_tok_s']:.1f} | {r['og_ratio']:.2f} | {r['og_accepted']:.0%} | {r['llama_plain']:.1f} | "
                     f"{r['llama_tok_s']:.1f} | {r['llama_ratio']:.2f} | {r['llama_accepted']:.0%} |")
    return "\n".join(lines)
