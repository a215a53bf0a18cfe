"""Where a decode step's time goes: onnxruntime's profiler on the main decoder, per op type; with
`--mtp`, where an MTP speculative round's time goes, per number of drafts.

    python bench/decode_profile.py PACKAGE [PACKAGE ...] [--threads 1] [--steps 128] [--top 8]
    python bench/decode_profile.py PACKAGE --mtp [--drafts 1,2,3,4] [--threads 1] [--steps 128]

Each package (mtpc's, the 0.18.0 builder's, any onnxruntime-genai folder) decodes `--steps`
greedy tokens after an 8-token prompt in onnxruntime-genai, in a fresh process, with
`enable_profiling` in the decoder's session options (the package's genai_config.json is
restored afterwards). Every node's kernel time is taken over the decode steps (the prompt's run
is left out) and its median kept, so a step that waited for a core does not count; the table
sums those medians per op type, then lists the slowest nodes. The profiler adds a few
microseconds to every node, so small ops look dearer than they are (bench/README.md).

`--mtp` decodes the package plainly and with og.MtpGenerator at each N, a fresh process each, with the
profiler on in both sessions, and splits a round into head forwards, the verify forward, replays
after a rejection and the runtime's own work (`mtpc.tuning.profile`), beside the plain step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT = list(range(10, 18))


def profile_child(package: Path, threads: int, steps: int, prefix: str) -> None:
    """Decodes with the profiler on; prints the profile file's path (run as `--child ...`)."""
    import onnxruntime_genai as og

    config = package / "genai_config.json"
    original = config.read_text()
    doc = json.loads(original)
    decoder = doc["model"]["decoder"]
    decoder.setdefault("session_options", {}).update(intra_op_num_threads=threads, inter_op_num_threads=1,
                                                     enable_profiling=prefix)
    # onnxruntime-genai 0.18.0 on CPU cannot load `shared_initializers` (the builder's packages list them).
    for section in (decoder, doc["model"].get("mtp") or {}):
        section.pop("shared_initializers", None)
    config.write_text(json.dumps(doc, indent=4))
    try:
        model = og.Model(str(package))
        params = og.GeneratorParams(model)
        length = len(PROMPT) + steps + 1
        params.set_search_options(do_sample=False, max_length=length, min_length=length)
        generator = og.Generator(model, params)
        generator.append_tokens(PROMPT)
        for _ in range(steps):
            generator.generate_next_token()
        del generator, params, model  # the profile is written when the session closes
    finally:
        config.write_text(original)


def summarize(events: list[dict]) -> dict:
    """Per-node median kernel time (us) over the decode runs, and each node's op type."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    if len(runs) < 2:
        raise SystemExit("the profile holds fewer than two runs: nothing was decoded")
    after_prompt = runs[0]["ts"] + runs[0]["dur"]
    times: dict[str, list[int]] = defaultdict(list)
    op_types: dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= after_prompt:
            node = e["name"].removesuffix("_kernel_time")
            times[node].append(e["dur"])
            op_types[node] = e["args"].get("op_name", "?")
    nodes = {node: median(v) for node, v in times.items()}
    return {"nodes": nodes, "op_types": op_types, "step_us": median(r["dur"] for r in runs[1:]),
            "steps": len(runs) - 1}


def report(label: str, summary: dict, top: int) -> str:
    nodes, op_types = summary["nodes"], summary["op_types"]
    by_op: dict[str, list[float]] = defaultdict(list)
    for node, us in nodes.items():
        by_op[op_types[node]].append(us)
    total = sum(nodes.values())
    lines = [f"## {label}", "",
             f"{summary['steps']} decode steps; model_run median {summary['step_us'] / 1000:.2f} ms; "
             f"sum of node medians {total / 1000:.2f} ms over {len(nodes)} nodes", "",
             "| op type | nodes | ms / step | share |", "|---|---:|---:|---:|"]
    for op, values in sorted(by_op.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"| {op} | {len(values)} | {sum(values) / 1000:.3f} | {sum(values) / total:.1%} |")
    lines += ["", "| slowest nodes | op type | us / step |", "|---|---|---:|"]
    for node, us in sorted(nodes.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| {node} | {op_types[node]} | {us:.0f} |")
    return "\n".join(lines)


def profile(package: Path, threads: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="mtpc-prof-") as tmp:
        prefix = str(Path(tmp) / "decode")
        done = subprocess.run([sys.executable, __file__, "--child", str(package), str(threads), str(steps), prefix],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{package}: decoding failed\n{done.stderr[-4000:]}")
        (written,) = Path(tmp).glob("decode*.json")
        return summarize(json.loads(written.read_text()))


def mtp_child(package: Path, threads: int, steps: int, drafts: int) -> None:
    """Prints one JSON line: the plain step (`drafts` 0) or one speculative round's parts."""
    from dataclasses import asdict

    from mtpc.tuning.profile import profile_plain, profile_speculative

    options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
    if drafts == 0:
        per_token, forward = profile_plain(package, PROMPT, steps, options)
        print(json.dumps({"ms_per_token": per_token, "forward_ms": forward}))
    else:
        costs = profile_speculative(package, PROMPT, steps, drafts, options)
        print(json.dumps({**asdict(costs), "round_ms": costs.round_ms, "ms_per_token": costs.ms_per_token}))


def mtp_report(package: Path, threads: int, steps: int, drafts: list[int]) -> str:
    def child(n: int) -> dict:
        done = subprocess.run([sys.executable, __file__, "--mtp-child", str(package), str(threads), str(steps), str(n)],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{package}: decoding failed\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    plain = child(0)
    lines = [f"## {package} (MTP, {threads} thread{'s' * (threads > 1)}, {steps} tokens)", "",
             f"plain: {plain['ms_per_token']:.2f} ms per token, of which the forward {plain['forward_ms']:.2f} ms", "",
             "| N | rounds | tokens/round | head ms | verify ms | replay ms | runtime ms | ms/round | ms/token "
             "| x plain | head forwards | replays |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in drafts:
        c = child(n)
        lines.append(f"| {n} | {c['rounds']} | {c['tokens'] / max(1, c['rounds']):.2f} | {c['head_ms']:.2f} | "
                     f"{c['verify_ms']:.2f} | {c['replay_ms']:.2f} | {c['runtime_ms']:.2f} | {c['round_ms']:.2f} | "
                     f"{c['ms_per_token']:.2f} | {plain['ms_per_token'] / c['ms_per_token']:.2f} | "
                     f"{c['head_forwards']} | {c['replays']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--top", type=int, default=8, help="slowest nodes listed per package")
    parser.add_argument("--mtp", action="store_true", help="split MTP speculative rounds instead (og.MtpGenerator)")
    parser.add_argument("--drafts", default="1,2,3,4", help="with --mtp: the N to profile, comma-separated")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--mtp-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mtp_child:
        package, threads, steps, drafts = args.mtp_child
        mtp_child(Path(package), int(threads), int(steps), int(drafts))
        return 0
    if args.child:
        package, threads, steps, prefix = args.child
        profile_child(Path(package), int(threads), int(steps), prefix)
        return 0
    if not args.packages:
        parser.error("name at least one package folder")
    if args.mtp:
        for package in args.packages:
            print(mtp_report(package, args.threads, args.steps, [int(n) for n in args.drafts.split(",")]))
            print()
        return 0
    for package in args.packages:
        print(report(f"{package} ({args.threads} thread{'s' * (args.threads > 1)})",
                     profile(package, args.threads, args.steps), args.top))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
