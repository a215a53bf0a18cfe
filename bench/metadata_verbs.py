"""The metadata verbs on 27B-shaped sources: how long `inspect`, `check SPEC`, `plan` and `diff SPEC SPEC` take.

    python bench/metadata_verbs.py [--repeat N] [--against COMMIT] [--json FILE]

Two sources of Qwen3.5-27B's shape, neither holding a weight byte (bench/sparse_source.py): a
Q4_0 GGUF and a Hugging Face folder of bfloat16 safetensors shards with its 248k-token
`tokenizer.json`. One spec per source as a 27B user writes it: int4 (block 32) with the embedding,
the LM head and `mtp.fc` kept float, float16 I/O, both targets (onnxruntime-genai cpu and onnx-genai); a second spec differs only in `max_draft_tokens`, a runtime setting, so `diff`
of the two must build no graph (both pin `state_window: 5`, which holds either draft count's verify; with
`auto` the window follows `max_draft_tokens` and the graphs would differ). The verbs, each a fresh process of `python -m mtpc`:

- `inspect SOURCE`, `check SPEC`, `plan SPEC -q --against <missing folder>`, `diff SPEC SPEC2`;
- `mtpc --help` beside them, the floor every run pays (the interpreter, the CLI), whose goal is 0.15 s
  (issue 10): it shows how busy the machine was in the same runs.

Every repetition runs every (source, verb) once, the order rotated from one repetition to the next,
so a busy spell on the shared machine falls on all of them; medians count (the verdict is the median
wall time's). Wall seconds, the fastest run's, and CPU seconds (user + system of the child, from
`wait4`) are reported: CPU time is what a wait for a core does not change. Bytecode is cached (one untimed warm-up run of each), as an installed
mtpc runs.

`--against COMMIT` runs that commit's code too (its `compiler/`, `schemas/` and `templates/` from
`git archive`, laid out as the `mtpc` package on `PYTHONPATH`; this checkout's working tree is laid
out the same way, so both pay the same import path), alternating the two for every run, and says
whether each verb's output (stdout and exit code) is the same on both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GOAL_S = 0.3
HELP_GOAL_S = 0.15
VERBS = ("inspect", "check", "plan", "diff")
HELP = ("-", "--help")  # the floor: no source, no verb's work
SPEC = """mtpc: 1
name: q27-{kind}
source: {{{kind}: {source}}}
precision: {{io_dtype: float16}}
quantization:
  default: {{bits: 4, block_size: 32}}
  overrides:
    - {{match: embed_tokens.weight, bits: null}}
    - {{match: lm_head.weight, bits: null}}
    - {{match: mtp.fc.weight, bits: null}}
targets:
  onnxruntime_genai: {{version: "0.18.0", execution_provider: cpu, max_draft_tokens: {draft},
                      state_window: 5}}
  onnx_genai: {{layout: flat}}
"""


def write_sources(work: Path) -> dict[str, dict[str, Path]]:
    """{kind: {"source", "spec", "spec2"}} for the GGUF and the HF folder."""
    from bench.sparse_source import architecture_27b, write, write_hf

    arch = architecture_27b()
    sources = {"gguf": write(work / "q27.gguf", arch), "hf": write_hf(work / "q27-hf", arch)}
    out = {}
    for kind, source in sources.items():
        specs = []
        for draft in (4, 3):
            spec = work / f"{kind}-draft{draft}.yaml"
            spec.write_text(SPEC.format(kind=kind, source=source.name, draft=draft))
            specs.append(spec)
        out[kind] = {"source": source, "spec": specs[0], "spec2": specs[1]}
    return out


def argv(verb: str, paths: dict[str, Path], work: Path) -> list[str]:
    if verb == "--help":
        return ["--help"]
    return {
        "inspect": ["inspect", str(paths["source"])],
        "check": ["check", str(paths["spec"])],
        "plan": ["plan", str(paths["spec"]), "-q", "--against", str(work / "no-such-package")],
        "diff": ["diff", str(paths["spec"]), str(paths["spec2"])],
    }[verb]


def timed(args: list[str], env: dict[str, str]) -> dict:
    """Wall and CPU seconds of one fresh `python -m mtpc ARGS`, with its output."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "mtpc", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=env, cwd="/")
    stdout = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "exit": child.returncode, "stdout": stdout}


def lay_out(tree: Path, into: Path) -> Path:
    """`tree`'s compiler/, schemas/ and templates/ as the `mtpc` package under `into` (a PYTHONPATH entry)."""
    package = into / "mtpc"
    shutil.copytree(tree / "compiler", package, ignore=shutil.ignore_patterns("__pycache__"))
    for data in ("schemas", "templates"):
        shutil.copytree(tree / data, package / data)
    return into


def code_under_test(work: Path, against: str | None) -> dict[str, dict[str, str]]:
    """{label: environment}: this checkout (as installed, or laid out beside the commit's), and the commit's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    if against is None:
        return {"this": env}
    base = work / "base-tree"
    base.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", against], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    return {against: {**env, "PYTHONPATH": str(lay_out(base, work / "base"))},
            "this": {**env, "PYTHONPATH": str(lay_out(REPO, work / "this"))}}


def measure(work: Path, repeat: int, against: str | None = None) -> dict:
    """{"runs": {(code, kind, verb): [run, ...]}, "load": (before, after)}."""
    sources = write_sources(work)
    codes = code_under_test(work, against)
    sources["-"] = {}
    cases = [(code, *HELP) for code in codes] + [(code, kind, verb) for kind in ("gguf", "hf") for verb in VERBS
                                                   for code in codes]
    runs: dict[tuple[str, str, str], list[dict]] = {case: [] for case in cases}
    for code, kind, verb in cases:  # warm-up: writes the bytecode, fills the page cache
        timed(argv(verb, sources[kind], work), codes[code])
    load_before = os.getloadavg()[0]
    for i in range(repeat):
        shift = i % len(cases)
        for code, kind, verb in cases[shift:] + cases[:shift]:
            runs[(code, kind, verb)].append(timed(argv(verb, sources[kind], work), codes[code]))
    return {"runs": runs, "load": (load_before, os.getloadavg()[0]), "codes": list(codes)}


def summary(measured: dict) -> dict[tuple[str, str, str], dict]:
    out = {}
    for case, runs in measured["runs"].items():
        outputs = {(r["exit"], r["stdout"]) for r in runs}
        out[case] = {"wall_s": median(r["wall_s"] for r in runs), "cpu_s": median(r["cpu_s"] for r in runs),
                     "fastest_s": min(r["wall_s"] for r in runs),
                     "exit": runs[0]["exit"], "stable": len(outputs) == 1, "stdout": runs[0]["stdout"]}
    return out


def table(measured: dict) -> str:
    rows = summary(measured)
    codes = measured["codes"]
    lines = []
    if len(codes) == 2:
        base, this = codes
        lines += [f"| source | verb | {base} wall | {base} CPU | this wall | this fastest | this CPU | goal | "
                  "| same output |", "|---|---|---:|---:|---:|---:|---:|---|---|---|"]
    else:
        this = codes[0]
        lines += ["| source | verb | wall s | fastest s | CPU s | goal | |", "|---|---|---:|---:|---:|---|---|"]
    for kind, verb in [HELP] + [(kind, verb) for kind in ("gguf", "hf") for verb in VERBS]:
        r = rows[(this, kind, verb)]
        goal = HELP_GOAL_S if verb == "--help" else GOAL_S
        cells = [f"{r['wall_s']:.3f}", f"{r['fastest_s']:.3f}", f"{r['cpu_s']:.3f}", f"<= {goal}",
                 "met" if r["wall_s"] <= goal else "missed"]
        if len(codes) == 2:
            b = rows[(base, kind, verb)]
            same = (b["exit"], b["stdout"]) == (r["exit"], r["stdout"]) and b["stable"] and r["stable"]
            cells = [f"{b['wall_s']:.3f}", f"{b['cpu_s']:.3f}", *cells, "yes" if same else "NO"]
        lines.append(f"| {SOURCE_NAMES[kind]} | {verb} | " + " | ".join(cells) + " |")
    before, after = measured["load"]
    lines.append(f"\n{os.cpu_count()} cores; load average {before:.2f} before the timed runs, {after:.2f} after; "
                 f"medians of {max(map(len, measured['runs'].values()))} interleaved runs")
    return "\n".join(lines)


SOURCE_NAMES = {"-": "", "gguf": "GGUF", "hf": "HF"}


def medians(work: Path, repeat: int = 3) -> dict[str, float]:
    """Median wall seconds of this checkout's runs: {"mtpc --help": s, "GGUF inspect": s, ..., "HF diff": s}
    (bench/vs_builder.py's metadata rows)."""
    rows = summary(measure(work, repeat))
    return {("mtpc --help" if verb == "--help" else f"{SOURCE_NAMES[kind]} {verb}"): r["wall_s"]
            for (_, kind, verb), r in rows.items()}


def main(argv_: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, metavar="N", help="timed runs of each verb (default 7)")
    parser.add_argument("--against", metavar="COMMIT", help="also run this commit's code, alternating, and compare outputs")
    parser.add_argument("--json", metavar="FILE", help="also write the medians as JSON")
    args = parser.parse_args(argv_)
    with tempfile.TemporaryDirectory(prefix="mtpc-verbs-") as tmp:
        measured = measure(Path(tmp), args.repeat, args.against)
    print(table(measured))
    if args.json:
        flat = {" ".join(k): {f: v for f, v in r.items() if f != "stdout"} for k, r in summary(measured).items()}
        Path(args.json).write_text(json.dumps({"medians": flat, "load": measured["load"]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
