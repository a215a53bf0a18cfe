"""Decoding a package in a fresh process and timing it: what bench/mtp_speedup.py and bench/llama_mtp.py share.

`measure` runs this file as a script on one package (`python bench/decode_runs.py PACKAGE THREADS DRAFTS
STEPS`), which prints one JSON line: a warm-up, then one measured decode with mtpc.tuning.decode.
`interleaved` rotates the order of the configurations each repeat. It imports neither bench script:
they import it (bench/ has no import cycles, as compiler/ has none; tests/test_import_cycles.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PY = sys.executable
PROMPT = list(range(10, 18))
WARMUP_STEPS = 16
DRAFTS = (1, 2, 3, 4)


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", **kw)  # llama.cpp prints raw bytes
    if done.returncode:
        raise SystemExit(f"failed (exit {done.returncode}): {' '.join(map(str, argv))}\n{done.stderr[-4000:]}")
    return done


def measure_child(package: Path, threads: int, drafts: int, steps: int) -> None:
    """Prints one JSON line: a warm-up, then one measured decode (this file run as a script)."""
    from mtpc.tuning.decode import decode
    from mtpc.tuning.package import open_package
    from mtpc.tuning.runtime import Runtime

    runtime = Runtime(open_package(package, needs_tokenizer=False), threads)
    decode(runtime, PROMPT, WARMUP_STEPS, drafts)
    result = decode(runtime, PROMPT, steps, drafts)
    print(json.dumps({"tok_s": result.tok_s, "tok_cpu_s": result.tok_cpu_s, "tokens": list(result.tokens),
                      "rounds": [[r.drafted, r.accepted] for r in result.rounds]}))


def measure(package: Path, threads: int, drafts: int, steps: int) -> dict:
    done = run([PY, __file__, str(package), str(threads), str(drafts), str(steps)])
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleaved(configs: list, repeats: int, measure_one) -> dict:
    """Every config measured `repeats` times, each repeat in an order rotated by a different offset."""
    results: dict = {config: [] for config in configs}
    for r in range(repeats):
        shift = (r * len(configs)) // max(repeats, 1)
        order = configs[shift:] + configs[:shift]
        if r % 2:
            order.reverse()
        for config in order:
            results[config].append(measure_one(config))
    return results


if __name__ == "__main__":
    package, threads, drafts, steps = sys.argv[1:5]
    measure_child(Path(package), int(threads), int(drafts), int(steps))
