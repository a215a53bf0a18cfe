"""`inspect owner/name` through the hub: bytes read and time, on the 27B-shaped and DeepSeek-V3-sized sparse sources.

    python bench/hub_inspect.py [--repeat N] [--against COMMIT] [--json FILE]

Two Hugging Face checkpoints holding no weight byte (each shard a real header over a hole): Qwen3.5-27B's
shape (bench/sparse_source.py: 12 shards, its 248k-token tokenizer.json) and DeepSeek-V3's (the conformance
suite's `RealSize`: 92k tensors in 64 shards, FP8 weights with their scales, an 8 MB index). Each is served by
the fixture hub (tests/fixtures/hub_server.py) on 127.0.0.1 and inspected by a fresh `python -m mtpc inspect
owner/name` with an empty cache every time (HF_HOME a new folder: the first run a user makes), beside
`inspect FOLDER` of the same files, measured in the same interleaved runs. Reported: the bytes the server sent
(the goal for the 27B shape is < 1 MiB: config.json, the index and the shards' headers by range request, never
the 9.4 MB tokenizer.json or a weight), the requests, and median wall and CPU seconds (CPU of the mtpc process: the
server's own work is not counted). `--against COMMIT` also times that commit's `inspect FOLDER` (its code laid
out as bench/metadata_verbs.py does), the reference for DeepSeek-V3's "1.6 s today".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.metadata_verbs import code_under_test, timed  # noqa: E402
from tests.fixtures.hub_server import FixtureRepo, HubServer, hub_env  # noqa: E402

GOAL_BYTES = 1 << 20
GOAL_S = 0.5
REPOS = {"q27": "bench/qwen3.5-27b-shaped", "ds3": "bench/deepseek-v3-shaped"}


def write_sources(work: Path) -> dict[str, Path]:
    from bench.sparse_source import architecture_27b, write_hf

    return {"q27": write_hf(work / "q27-hf", architecture_27b()), "ds3": write_real_size("deepseek3", work / "ds3-hf")}


def write_real_size(family_name: str, folder: Path) -> Path:
    """A family's `RealSize` as tests/conformance/test_metadata_only.py writes it: a shard per layer, no data."""
    from mtpc.weights import canonical_shapes
    from tests.conformance.families import family
    from tests.fixtures.safetensors_writer import write_sparse_safetensors

    real = family(family_name).real_size()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(real.config))
    shards: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for tensor, shape in [*(t for c, s in canonical_shapes(real.arch).items() for t in real.names(c, s)), *real.extra.items()]:
        parts = tensor.split(".")
        shards[parts[2] if tensor.startswith("model.layers.") else parts[0]][tensor] = shape
    weight_map = {}
    for i, (_, shapes) in enumerate(sorted(shards.items())):
        filename = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_sparse_safetensors(folder / filename, shapes, dtypes={n: c for n in shapes if (c := real.dtypes(n))})
        weight_map.update({n: filename for n in shapes})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def measure(work: Path, repeat: int, against: str | None) -> dict:
    sources = write_sources(work)
    codes = code_under_test(work, against)
    server = HubServer({REPOS[k]: FixtureRepo.of(folder) for k, folder in sources.items()}).start()
    runs: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    cases = [(code, kind, where) for kind in sources for code in codes for where in ("hub", "folder")
             if where == "folder" or code == "this"]
    count = 0

    def run(code: str, kind: str, where: str) -> dict:
        nonlocal count
        count += 1
        if where == "hub":
            env = {**hub_env(server, work / f"hf-home-{count}"), **{k: v for k, v in codes[code].items()
                                                                   if k == "PYTHONPATH"}}
            server.reset()
            result = timed(["inspect", REPOS[kind]], env)
            result.update(bytes=server.bytes_sent(), requests=len(server.requests))
            return result
        return timed(["inspect", str(sources[kind])], codes[code])

    try:
        for case in cases:  # warm-up: bytecode, page cache
            run(*case)
        load = os.getloadavg()[0]
        for i in range(repeat):
            shift = i % len(cases)
            for case in cases[shift:] + cases[:shift]:
                runs[case].append(run(*case))
    finally:
        server.stop()
    return {"runs": runs, "load": (load, os.getloadavg()[0]), "codes": list(codes)}


def table(measured: dict) -> str:
    lines = ["| source | inspect | code | wall s (median) | CPU s (median) | bytes read | requests | goal | |",
             "|---|---|---|---:|---:|---:|---:|---|---|"]
    for (code, kind, where), runs in sorted(measured["runs"].items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        wall, cpu = median(r["wall_s"] for r in runs), median(r["cpu_s"] for r in runs)
        assert all(r["exit"] == 0 for r in runs), (code, kind, where)
        read = f"{max(r['bytes'] for r in runs):,}" if where == "hub" else ""
        requests = str(max(r["requests"] for r in runs)) if where == "hub" else ""
        goals = [f"<= {GOAL_S} s"] + (["< 1 MiB"] if kind == "q27" and where == "hub" else [])
        met = [wall <= GOAL_S] + ([max(r["bytes"] for r in runs) < GOAL_BYTES] if len(goals) > 1 else [])
        verdict = " / ".join("met" if m else "missed" for m in met)
        lines.append(f"| {kind} | {'owner/name (hub)' if where == 'hub' else 'FOLDER'} | {code} | {wall:.3f} | "
                     f"{cpu:.3f} | {read} | {requests} | {', '.join(goals)} | {verdict} |")
    before, after = measured["load"]
    lines.append(f"\n{os.cpu_count()} cores; load average {before:.2f} before the timed runs, {after:.2f} after; "
                 f"medians of {max(map(len, measured['runs'].values()))} interleaved runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, metavar="N")
    parser.add_argument("--against", metavar="COMMIT", help="also time that commit's inspect FOLDER")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mtpc-hub-inspect-") as tmp:
        measured = measure(Path(tmp), args.repeat, args.against)
    print(table(measured))
    if args.json:
        rows = {f"{code} {kind} {where}": {"wall_s": median(r["wall_s"] for r in runs),
                                           "cpu_s": median(r["cpu_s"] for r in runs),
                                           "bytes": max((r.get("bytes", 0) for r in runs), default=0)}
                for (code, kind, where), runs in measured["runs"].items()}
        Path(args.json).write_text(json.dumps(rows, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
