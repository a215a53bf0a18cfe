"""How close `mtpc tune`'s predicted tokens/s come to og.MtpGenerator's measured ones, per draft count.

    python bench/tune_accuracy.py [PACKAGE ...] [--size small|medium] [--threads 1] [--new-tokens 30]
                                  [--rounds 5] [--max-draft 4] [--prompts FILE] [--json FILE]

Without PACKAGE it compiles tiny Qwen3.5 packages whose heads are fitted to the built-in
prompts (tests/fixtures/tune_packages.py; five steps of seven memorised, so about 70 % of
first drafts are right) and ones with a random head, at `--size` small (16 layers, hidden
64) and medium (12 layers, hidden 512, vocabulary 8192; a few minutes to build). A fitted
head knows only the first 31 tokens of each continuation, so keep --new-tokens under that.

Every round runs, each in a fresh process and in a shuffled order: `mtpc tune` (its
prediction for N = 0..max), then plain og.Generator decoding and og.MtpGenerator with
N = 1..max on the same prompts, timing the decoding after each prompt's forward (what tune
predicts) on the wall clock and in CPU-seconds of the process. The tables show medians over
the rounds, the error of each prediction and the speedups, predicted and measured; --json
writes every run. On a shared machine the wall clock moves with whatever else runs; the
CPU-seconds barely do, so they are what tells the model's error from the machine's.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def decode_child(package: str, draft: int, new_tokens: int, threads: int, prompts_file: str) -> None:
    """Decodes every prompt with N drafts (0: og.Generator); prints generated tokens and seconds."""
    from mtpc.tuning.decode import decode
    from mtpc.tuning.package import open_package
    from mtpc.tuning.prompts import BUILT_IN, read_prompts
    from mtpc.tuning.runtime import Runtime

    runtime = Runtime(open_package(package), threads)
    texts = [t for _, t in read_prompts(prompts_file)] if prompts_file else list(BUILT_IN)
    tokens, seconds, cpu_seconds = 0, 0.0, 0.0
    for text in texts:
        # Tokens count an end token (a step made it), as tune's predictions do.
        run = decode(runtime, runtime.encode(text), new_tokens, draft)
        tokens, seconds, cpu_seconds = tokens + len(run.tokens), seconds + run.wall_s, cpu_seconds + run.cpu_s
    print(json.dumps({"tokens": tokens, "seconds": seconds, "cpu_seconds": cpu_seconds}))


def _run(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def measure_package(package: Path, args) -> dict:
    prompts = ["--prompts", str(args.prompts)] if args.prompts else []
    tune_argv = ["-m", "mtpc", "tune", str(package), "--format", "json", "--threads", str(args.threads),
                 "--new-tokens", str(args.new_tokens), "--max-draft", str(args.max_draft), *prompts]
    jobs = ["tune", *range(args.max_draft + 1)]
    counts = range(args.max_draft + 1)
    predicted, measured = {n: [] for n in counts}, {n: [] for n in counts}
    predicted_cpu, measured_cpu = {n: [] for n in counts}, {n: [] for n in counts}
    recommended: list[int] = []
    order = random.Random(str(package))
    for round_ in range(args.rounds):
        order.shuffle(jobs)
        for job in jobs:
            if job == "tune":
                report = _run(tune_argv)
                for row in report["predictions"]:
                    predicted[row["draft"]].append(row["tokens_per_second"])
                    predicted_cpu[row["draft"]].append(row["tokens_per_cpu_second"])
                recommended.append(report["recommendation"]["draft"])
            else:
                run = _run([__file__, "--child", str(package), str(job), str(args.new_tokens), str(args.threads),
                            str(args.prompts or "")])
                measured[job].append(run["tokens"] / run["seconds"])
                measured_cpu[job].append(run["tokens"] / run["cpu_seconds"])
        print(f"  {package.name}: round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    return {"package": str(package), "predicted": predicted, "measured": measured, "predicted_cpu": predicted_cpu,
            "measured_cpu": measured_cpu, "recommended": recommended}


def table(result: dict) -> str:
    medians = {key: {int(n): median(v) for n, v in result[key].items()}
               for key in ("predicted", "measured", "predicted_cpu", "measured_cpu")}
    measured = medians["measured"]
    best = max(measured, key=measured.get)
    lines = [f"## {result['package']}", "",
             f"tune recommended N = {', '.join(map(str, result['recommended']))} over the rounds; "
             f"fastest measured: N = {best}", "",
             "| N | predicted tok/s | measured tok/s | error | predicted vs N=0 | measured vs N=0 "
             "| predicted tok/CPU-s | measured tok/CPU-s | error |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted(measured):
        wall, cpu = (medians["predicted"][n], measured[n]), (medians["predicted_cpu"][n], medians["measured_cpu"][n])
        lines.append(f"| {n} | {wall[0]:.4g} | {wall[1]:.4g} | {wall[0] / wall[1] - 1:+.1%} | "
                     f"{wall[0] / medians['predicted'][0]:.2f}x | {wall[1] / measured[0]:.2f}x | "
                     f"{cpu[0]:.4g} | {cpu[1]:.4g} | {cpu[0] / cpu[1] - 1:+.1%} |")
    return "\n".join(lines)


def build_packages(size: str, folder: Path) -> list[Path]:
    from mtpc.ir import LinearAttentionDims
    from mtpc.tuning.prompts import BUILT_IN
    from tests.fixtures.tune_packages import compile_package, tune_arch

    if size == "small":
        arch = tune_arch(16)
    else:
        arch = tune_arch(12, hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=2,
                         vocab_size=8192, linear_attention=LinearAttentionDims(num_key_heads=4, key_head_dim=64,
                                                                               num_value_heads=8, value_head_dim=64, conv_kernel=4))
    print(f"building the {size} packages in {folder}", file=sys.stderr)
    return [compile_package(folder, f"{size}-fitted", arch, fitted_to=BUILT_IN),
            compile_package(folder, f"{size}-random", arch, fitted_to=None)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", type=Path)
    parser.add_argument("--size", choices=("small", "medium"), default="small")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-draft", type=int, default=4)
    parser.add_argument("--prompts", type=Path)
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        package, draft, new_tokens, threads, prompts = args.child
        decode_child(package, int(draft), int(new_tokens), int(threads), prompts)
        return 0
    with tempfile.TemporaryDirectory(prefix="mtpc-tune-bench-") as tmp:
        packages = args.packages or build_packages(args.size, Path(tmp))
        results = []
        for package in packages:
            results.append(measure_package(package, args))
            print(table(results[-1]))
            print()
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "new_tokens": args.new_tokens, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
