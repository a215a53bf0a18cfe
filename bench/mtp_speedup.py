"""Does MTP make decoding faster? Plain greedy against og.MtpGenerator with N = 1..4 drafts, one table.

    pip install -e '.[bench]'
    python bench/mtp_speedup.py [--repeats 5] [--steps 128] [--threads 1,2] [--work DIR] [--json FILE]
                                [--only og|llama|options] [--options] [--unwindowed] [--precisions fp32,int4]
                                [--variants TEXT,...]

1. One seeded Qwen3.5 checkpoint (`compile_bench.SIZES["mtp"]`: 16 layers, vocabulary 32k, 351M
   parameters) with three heads (bench/mtp_heads.py): **best** (final norms zeroed: trunk and head
   always agree), **worst** (the random head), **realistic** (a head fitted to each package's own
   greedy continuation of the prompt, about 60 % of first drafts right).
2. mtpc compiles each at float32 and int4 (blocks of 32, the CPU defaults); `--options` adds the
   draft-side options (docs/spec.md, `mtp.draft`) on the same checkpoints.
3. Each package decodes `--steps` tokens after an 8-token prompt in onnxruntime-genai 0.18.0, plain
   (`og.Generator`, N = 0) and speculative (`og.MtpGenerator`, N = 1..4), at 1 and 2 intra-op
   threads, every measurement a fresh process after a 16-token warm-up (mtpc.tuning.decode).
   Within a (precision, threads) group every configuration runs once per repeat, the order rotated
   each time, so a busy spell of the shared machine falls on all of them; medians count.
   Tokens per CPU-second (user + system time of the decoding process) do not count waits for a core.
4. The same checkpoint as llama.cpp sees it (bench/llama_mtp.py): its converter's GGUF, quantized to
   Q4_0 and Q8_0, decoded by llama.cpp (`llama-bench` plain, `llama-speculative-simple --spec-type
   draft-mtp` with N drafts) and by mtpc's `keep: source` package of the very same file, best and
   worst case, side by side.

Columns: tok/s and its ratio to the same package's plain decode; the same per CPU-second; the share
of drafts accepted at each draft position (of the rounds whose earlier drafts were all accepted);
tokens per round; and whether the speculative tokens equal the plain ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.decode_runs import DRAFTS, PROMPT, PY, interleaved, measure, measure_child, run  # noqa: E402

PRECISIONS = {"fp32": "", "int4": "  default: {bits: 4, block_size: 32}\n",
              # int4 with float activations: the one int4 package whose speculative tokens are greedy's on this
              # random trunk (at the CPU default accuracy_level 4 a wide verify breaks its many near ties
              # otherwise, and a memorised head's continuation is then not the one decoded); `--precisions`.
              "int4-acc0": "  default: {bits: 4, block_size: 32, accuracy_level: 0}\n"}
DEFAULT_PRECISIONS = ("fp32", "int4")
REALISTIC_SHARE = 0.6


@dataclass(frozen=True)
class Variant:
    """A package to measure: which head, which precision, and spec lines for the draft options."""

    label: str
    head: str  # best | worst | realistic
    precision: str  # a key of PRECISIONS
    mtp: str = ""  # YAML under `mtp:`
    overrides: tuple[str, ...] = ()  # quantization overrides (flow-style mappings)
    state_window: str = ""  # targets.onnxruntime_genai.state_window ("": the default, auto)

    @property
    def name(self) -> str:
        return "-".join(part for part in (self.head, self.precision, self.slug) if part)

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.label.partition(", ")[2]).strip("-")

    def checkpoint(self) -> str:
        return f"realistic-{self.precision}" if self.head == "realistic" else self.head

    def spec(self) -> str:
        lines = [f"mtpc: 1\nname: {self.name}\nsource: {{hf: checkpoints/{self.checkpoint()}}}\n"]
        if self.mtp:
            lines.append("mtp:\n" + "".join(f"  {line}\n" for line in self.mtp.splitlines()))
        if PRECISIONS[self.precision] or self.overrides:
            lines.append("quantization:\n" + PRECISIONS[self.precision])
            if self.overrides:
                lines.append("  overrides:\n" + "".join(f"    - {o}\n" for o in self.overrides))
        window = f", state_window: {self.state_window}" if self.state_window else ""
        # The bench decodes 1..4 drafts, so its packages hold four (the default, 2, would window W = 3).
        lines.append(f"targets:\n  onnxruntime_genai: {{execution_provider: cpu, max_draft_tokens: 4{window}}}\n")
        return "".join(lines)


def variants(options: bool, base: bool = True, unwindowed: bool = False,
             precisions: tuple[str, ...] = DEFAULT_PRECISIONS) -> list[Variant]:
    out = [Variant(head, head, precision) for precision in precisions for head in ("best", "worst", "realistic")] if base else []
    if unwindowed:  # each package with the other state window than `auto` gives it: float32 off (every
        # rejected draft replays), int4 at the CPU's accuracy_level 4 (which auto leaves unwindowed) a window of 5
        out += [Variant(f"{head}, state window {other}", head, precision, state_window=other)
                for precision, other in (("fp32", "off"), ("int4", "5"), ("int4-acc0", "off"))
                if precision in precisions for head in ("best", "worst", "realistic")]
    if options:
        from bench.mtp_options import option_variants

        out += option_variants(Variant)
    return out


# ----------------------------------------------------------------------------- building


def compile_package(work: Path, variant: Variant) -> Path:
    out = work / "packages" / variant.name
    if (out / "genai_config.json").is_file():
        return out
    spec = work / f"{variant.name}.yaml"
    spec.write_text(variant.spec())
    print(f"compiling {variant.name}", file=sys.stderr, flush=True)
    run([PY, "-m", "mtpc", "compile", str(spec), "-o", str(out), "-q"])
    return out


def checkpoints(work: Path, size: str = "mtp"):
    """The checkpoint with its best and worst heads under `work/checkpoints` (written unless there)."""
    from bench.mtp_heads import Checkpoints

    folder = work / "checkpoints"
    made = Checkpoints(folder, size)
    if not (folder / "worst" / "head.safetensors").is_file():
        print("writing the checkpoint and its best and worst heads", file=sys.stderr, flush=True)
        made.write_trunk()
        made.best()
        made.worst()
    return made


def build(work: Path, wanted: list[Variant], steps: int, size: str = "mtp") -> dict[Variant, Path]:
    made = checkpoints(work, size)
    folder = work / "checkpoints"
    packages: dict[Variant, Path] = {}
    for precision in dict.fromkeys(v.precision for v in wanted if v.head == "realistic"):
        name = f"realistic-{precision}"
        if not (folder / name / "head.safetensors").is_file():
            print(f"fitting the realistic head to the {precision} trunk", file=sys.stderr, flush=True)
            base = compile_package(work, Variant("worst", "worst", precision))
            # The fit covers every draft a run can make: the warm-up's and the measured run's, N past the end.
            made.write_realistic(name, base, PROMPT, steps + max(DRAFTS) + 1, REALISTIC_SHARE)
    for variant in wanted:
        packages[variant] = compile_package(work, variant)
    return packages


# ----------------------------------------------------------------------------- measuring


def og_rows(packages: dict[Variant, Path], threads_list: list[int], repeats: int, steps: int,
            drafts: tuple[int, ...] = DRAFTS) -> list[dict]:
    from mtpc.tuning.decode import Round, round_acceptance, tokens_per_round

    rows = []
    for precision in PRECISIONS:
        for threads in threads_list:
            configs = [(v, n) for v in packages if v.precision == precision for n in (0, *drafts)]
            print(f"decoding {precision} at {threads} thread(s): {len(configs)} configurations x {repeats}",
                  file=sys.stderr, flush=True)
            results = interleaved(configs, repeats, lambda c: measure(packages[c[0]], threads, c[1], steps))
            for variant in dict.fromkeys(v for v, _ in configs):
                plain = results[(variant, 0)]
                for n in (0, *drafts):
                    runs = results[(variant, n)]
                    rounds = [Round(d, a, 0.0) for d, a in runs[0]["rounds"]]
                    rows.append({
                        "precision": precision, "threads": threads, "head": variant.label, "drafts": n,
                        "tok_s": median(r["tok_s"] for r in runs), "tok_cpu_s": median(r["tok_cpu_s"] for r in runs),
                        "plain_tok_s": median(r["tok_s"] for r in plain),
                        "plain_tok_cpu_s": median(r["tok_cpu_s"] for r in plain),
                        "acceptance": list(round_acceptance(rounds, n)) if n else [],
                        "tokens_per_round": tokens_per_round(rounds) if n else 1.0,
                        "equal": all(r["tokens"] == plain[0]["tokens"] for r in runs),
                    })
    return rows


# ----------------------------------------------------------------------------- reporting


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def og_table(rows: list[dict]) -> str:
    lines = ["| precision | threads | head | N | tok/s | x plain | tok/CPU-s | x plain (CPU) | accepted at 1/2/3/4 "
             "| tokens/round | = greedy |", "|---|---:|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        lines.append(
            f"| {r['precision']} | {r['threads']} | {r['head']} | {r['drafts'] or 'plain'} | {r['tok_s']:.1f} | "
            f"{r['tok_s'] / r['plain_tok_s']:.2f} | {r['tok_cpu_s']:.1f} | {r['tok_cpu_s'] / r['plain_tok_cpu_s']:.2f} | "
            f"{' / '.join(_share(a) for a in r['acceptance']) or '-'} | {r['tokens_per_round']:.2f} | "
            f"{'yes' if r['equal'] else 'NO'} |")
    return "\n".join(lines)


def goals(rows: list[dict], llama: list[dict]) -> str:
    def ratio(row: dict) -> float:
        return row["tok_s"] / row["plain_tok_s"]

    def pick(precision: str, head: str, n: int | None = None) -> list[dict]:
        return [r for r in rows if r["precision"] == precision and r["threads"] == 1 and r["drafts"]
                and r["head"].partition(",")[0] == head and (n is None or r["drafts"] == n)]

    lines = ["| goal (1 thread) | measured | |", "|---|---|---|"]
    for precision in PRECISIONS:
        found = pick(precision, "best", 4)
        if found:
            top = max(found, key=ratio)
            lines.append(f"| best case, N=4, {precision}: MTP / plain tok/s >= 3.0 | {ratio(top):.2f} ({top['head']}) | "
                         f"{'met' if ratio(top) >= 3.0 else 'missed'} |")
    for precision in PRECISIONS:
        for r in pick(precision, "worst", 1):
            lines.append(f"| worst case, N=1, {precision}: >= 0.40 | {ratio(r):.2f} | {'met' if ratio(r) >= 0.4 else 'missed'} |")
    for precision in PRECISIONS:
        found = pick(precision, "realistic")
        if found:
            top = max(found, key=ratio)
            lines.append(f"| realistic head, {precision}: the best N | N={top['drafts']}: {ratio(top):.2f} ({top['head']}) | |")
    for row in llama:
        if row["head"] == "best" and row["threads"] == 1 and row["drafts"] == 4:
            ours, theirs = row["og_ratio"], row["llama_ratio"]
            lines.append(f"| best case, {row['qtype']} GGUF, N={row['drafts']}: mtpc MTP/plain >= llama.cpp's | "
                         f"{ours:.2f} vs {theirs:.2f} | {'met' if ours >= theirs else 'missed'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per configuration (medians count)")
    parser.add_argument("--steps", type=int, default=128, help="tokens decoded after the prompt")
    parser.add_argument("--threads", default="1,2", help="intra-op thread counts, comma-separated")
    parser.add_argument("--drafts", default="1,2,3,4", help="the N to measure besides plain decoding, comma-separated")
    parser.add_argument("--size", choices=("mtp", "small"), default="mtp",
                        help="mtp: the 348M-class checkpoint; small: a 4-layer one for a smoke run")
    parser.add_argument("--work", type=Path, help="keep the checkpoints and packages here (reused by the next run)")
    parser.add_argument("--only", choices=("og", "llama", "options"),
                        help="only onnxruntime-genai's rows, only llama.cpp's, or only the draft options' rows "
                             "(each option against its own package's plain decoding)")
    parser.add_argument("--options", action="store_true", help="also the draft options (bench/mtp_options.py)")
    parser.add_argument("--unwindowed", action="store_true",
                        help="also each package with the other state window than auto gives it, for comparison: "
                             "fp32 with state_window: off (a rejected draft replays), int4 with state_window: 5")
    parser.add_argument("--precisions", default=",".join(DEFAULT_PRECISIONS),
                        help=f"the package precisions, comma-separated, of {', '.join(PRECISIONS)}")
    parser.add_argument("--variants", metavar="TEXT,...",
                        help="only the packages whose name contains one of these (e.g. int4-draft-side)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        package, threads, drafts, steps = args.child
        measure_child(Path(package), int(threads), int(drafts), int(steps))
        return 0
    threads = [int(t) for t in args.threads.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="mtpc-mtp-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load = time.time(), os.getloadavg()[0]
    try:
        rows, llama = [], []
        if args.only != "llama":
            wanted = variants(True, base=False) if args.only == "options" else variants(
                args.options, unwindowed=args.unwindowed, precisions=tuple(args.precisions.split(",")))
            if args.variants:
                wanted = [v for v in wanted if any(part in v.name for part in args.variants.split(","))]
            packages = build(work, wanted, args.steps, args.size)
            rows = og_rows(packages, threads, args.repeats, args.steps, tuple(int(n) for n in args.drafts.split(",")))
        if args.only not in ("og", "options"):
            from bench.llama_mtp import llama_rows

            checkpoints(work, args.size)
            llama = llama_rows(work, threads, args.repeats, args.steps, tuple(int(n) for n in args.drafts.split(",")))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"MTP speculative decoding vs plain greedy, {os.cpu_count()} cores, {args.steps} tokens, medians of "
          f"{args.repeats}; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"{(time.time() - started) / 60:.0f} minutes\n")
    if rows:
        print(og_table(rows) + "\n")
    if llama:
        from bench.llama_mtp import llama_table

        print(llama_table(llama) + "\n")
    print(goals(rows, llama))
    if args.json:
        Path(args.json).write_text(json.dumps({"onnxruntime_genai": rows, "llama_cpp": llama}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
