"""What hashing every file as it is written (for manifest.json) costs `mtpc compile`, as a ratio.

The same compile, in fresh processes, interleaved: with the writer's sha256 as shipped, and with
the writer's hash replaced by one that does nothing (the reference: the compile without the
manifest's hashing; its manifest then lists dummy digests, and is thrown away). The checkpoint is
compile_bench.py's synthetic one of the chosen size, float32 and int4 specs.

    .venv/bin/python bench/manifest_hash.py --size medium --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compile_bench import write_inputs  # noqa: E402


class _NoHash:
    def update(self, data) -> None:
        pass

    def hexdigest(self) -> str:
        return "0" * 64


def child(spec: Path, target: Path, hashing: bool) -> None:
    from mtpc.output import write
    from mtpc.pipeline.driver import build

    if not hashing:
        write.hashlib = type("hashlib", (), {"sha256": staticmethod(_NoHash)})
    start = time.perf_counter()
    write.write_package(build(spec).artifacts, target)
    print(json.dumps({"work_s": time.perf_counter() - start}))


def run(spec: Path, target: Path, hashing: bool) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", str(spec), str(target), "1" if hashing else "0"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])["work_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("small", "medium", "large"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), args.child[2] == "1")
        return
    with tempfile.TemporaryDirectory(prefix="mtpc-manifest-bench-") as tmp:
        work = Path(tmp)
        specs = write_inputs(work, args.size)
        print(f"size {args.size}, {args.repeat} interleaved pairs per spec (seconds of build + write)")
        for label, spec in specs.items():
            hashed, plain = [], []
            for i in range(args.repeat):
                for hashing, times in ((True, hashed), (False, plain)) if i % 2 == 0 else ((False, plain), (True, hashed)):
                    times.append(run(spec, work / f"out-{label}", hashing))
            ratio = statistics.median(hashed) / statistics.median(plain)
            print(f"  {label:8} hashed {statistics.median(hashed):7.2f} s   not hashed {statistics.median(plain):7.2f} s"
                  f"   ratio {ratio:.3f}   package {sum(p.stat().st_size for p in (work / f'out-{label}').rglob('*') if p.is_file()) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
