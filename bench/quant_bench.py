"""Throughput and memory of mtpc's quantizers, as ratios against a plain numpy pass measured in the same run.

Absolute MB/s depend on the machine; the time of a plain numpy pass over the same
bytes, measured right beside each run, mostly does not. So this prints both, and
the ratios are what to compare across machines and commits.

    .venv/bin/python bench/quant_bench.py                          # 1024 x 1024, seconds
    .venv/bin/python bench/quant_bench.py --rows 4096 --cols 4096 --repeat 5 --json q.json

Cases, each on one `[rows, cols]` weight:
- `quantize_linear int4` / `int8`: `mtpc.weights.quant.quantize_linear(w, bits, 32)` on a float32
  matrix (what `bits: 4` / `bits: 8` do to a float source's weights). Reference: one
  `np.abs(w).max(axis=-1)` over the same matrix.
- `gguf Q8_0` / `Q4_K` / `Q6_K`: `mtpc.sources.gguf.quant.to_quantized_tensor` on raw GGUF
  blocks (what `keep: source` does to a GGUF's weights, MatMulNBits form). Reference: one
  `raw.astype(np.float32).sum()` over the same block bytes. The blocks are random bytes
  with sane fp16 scale fields, made here (any bit pattern is a valid code or sub-scale).

MB/s are over each case's input bytes (1 MB = 10**6 bytes): the float32 matrix, or the raw
blocks. Repetitions interleave every case with its reference (which runs first alternates),
after one untimed warm-up of each; the medians count.

Memory: the peak of `tracemalloc` (numpy reports its buffers to it) while converting once,
above what was allocated before: the input is not counted, the output is. Printed against
the input's bytes, and for GGUF blocks also against the float32 size of the same weight.
The issue's bound is that quantizing a tensor holds at most about 1.5x that tensor, that is
peak extra / input <= 0.5 for `quantize_linear`. Timings run without tracemalloc.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

from mtpc.weights.quant import quantize_linear
from mtpc.sources.gguf.quant import to_quantized_tensor

BLOCK_SIZE = 32
GGUF_TYPES = (QT.Q8_0, QT.Q4_K, QT.Q6_K)
# Byte ranges of each block's fp16 scale fields (`d`, and `dmin` for Q4_K), per gguf-py's layouts:
# Q8_0 = d, 32 int8 codes; Q4_K = d, dmin, 12 scale bytes, 128 nibble bytes; Q6_K = ql 128, qh 64,
# 16 int8 scales, d. Every other byte is a valid code or sub-scale whatever its value.
FP16_FIELDS = {QT.Q8_0: ((0, 2),), QT.Q4_K: ((0, 2), (2, 4)), QT.Q6_K: ((208, 210),)}
MB = 1e6


def random_blocks(qtype: QT, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Raw GGUF blocks of a `[rows, cols]` weight, as GGUFReader hands them out: uint8 `[rows, cols / block * size]`."""
    block, size = GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise SystemExit(f"--cols must be a multiple of {block} for {qtype.name}")
    raw = rng.integers(0, 256, (rows * (cols // block), size), dtype=np.uint8)
    for start, end in FP16_FIELDS[qtype]:
        scales = rng.uniform(2.0**-10, 2.0**-4, raw.shape[0]) * rng.choice([1.0, -1.0], raw.shape[0])
        raw[:, start:end] = scales.astype(np.float16)[:, None].view(np.uint8)
    return raw.reshape(rows, -1)


@dataclass(frozen=True)
class Case:
    name: str
    input_bytes: int
    float32_bytes: int  # the same weight as float32
    run: Callable[[], object]
    reference: Callable[[], object]


def cases(rows: int, cols: int, seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)
    out = []
    for bits in (4, 8):
        out.append(Case(
            f"quantize_linear int{bits}", w.nbytes, w.nbytes,
            lambda bits=bits: quantize_linear(w, bits, BLOCK_SIZE),
            lambda: np.abs(w).max(axis=-1),
        ))
    for qtype in GGUF_TYPES:
        raw = random_blocks(qtype, rows, cols, rng)
        out.append(Case(
            f"gguf {qtype.name}", raw.nbytes, w.nbytes,
            lambda raw=raw, qtype=qtype: to_quantized_tensor(raw, qtype, rows, cols),
            lambda raw=raw: raw.astype(np.float32).sum(),
        ))
    return out


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def peak_extra_bytes(fn: Callable[[], object]) -> int:
    """Most bytes held above the starting point while `fn` runs (its result included)."""
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return peak - base


@dataclass
class Row:
    name: str
    input_bytes: int
    float32_bytes: int
    mtpc_s: float  # medians
    reference_s: float
    peak_extra_bytes: int

    @property
    def mtpc_mb_s(self) -> float:
        return self.input_bytes / MB / self.mtpc_s

    @property
    def reference_mb_s(self) -> float:
        return self.input_bytes / MB / self.reference_s

    @property
    def time_ratio(self) -> float:
        return self.mtpc_s / self.reference_s

    @property
    def extra_per_input(self) -> float:
        return self.peak_extra_bytes / self.input_bytes

    @property
    def extra_per_float32(self) -> float:
        return self.peak_extra_bytes / self.float32_bytes


def measure(all_cases: list[Case], repeat: int) -> list[Row]:
    for case in all_cases:  # warm-up: first-touch page faults, lazy imports
        seconds(case.run)
        seconds(case.reference)
    times: dict[str, tuple[list[float], list[float]]] = {c.name: ([], []) for c in all_cases}
    for r in range(repeat):
        for case in all_cases:
            mine, ref = times[case.name]
            if r % 2 == 0:
                mine.append(seconds(case.run))
                ref.append(seconds(case.reference))
            else:
                ref.append(seconds(case.reference))
                mine.append(seconds(case.run))
    rows = []
    for case in all_cases:
        mine, ref = times[case.name]
        rows.append(Row(case.name, case.input_bytes, case.float32_bytes, statistics.median(mine),
                        statistics.median(ref), peak_extra_bytes(case.run)))
    return rows


def ratios(rows: list[Row]) -> list[tuple[str, float]]:
    out = [(f"{r.name}: time / reference time", r.time_ratio) for r in rows]
    out += [(f"{r.name}: peak extra memory / input", r.extra_per_input) for r in rows]
    out += [(f"{r.name}: peak extra memory / float32 weight", r.extra_per_float32) for r in rows if r.name.startswith("gguf")]
    return out


def report(rows_n: int, cols_n: int, repeat: int, rows: list[Row], ratio_rows: list[tuple[str, float]]) -> str:
    lines = [
        f"mtpc quantization bench: {rows_n} x {cols_n} weight ({rows_n * cols_n * 4 / 2**20:.1f} MiB as float32), "
        f"medians of {repeat}; MB = 10**6 bytes of each case's input",
        "reference: np.abs(w).max(axis=-1) over the float32 matrix; raw.astype(np.float32).sum() over the GGUF blocks",
        "",
        f"{'case':<22}{'input MiB':>10}{'mtpc MB/s':>11}{'ref MB/s':>10}{'time/ref':>10}{'peak extra MiB':>16}",
    ]
    for r in rows:
        lines.append(
            f"{r.name:<22}{r.input_bytes / 2**20:10.1f}{r.mtpc_mb_s:11.0f}{r.reference_mb_s:10.0f}"
            f"{r.time_ratio:10.2f}{r.peak_extra_bytes / 2**20:16.1f}"
        )
    lines += ["", "ratios"]
    width = max(len(name) for name, _ in ratio_rows)
    lines += [f"  {name:<{width}}  {value:7.2f}" for name, value in ratio_rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1024, help="output features N (default 1024)")
    parser.add_argument("--cols", type=int, default=1024, help="input features K, a multiple of 256 (default 1024)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per case; the median counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.rows < 1 or args.cols < 256 or args.cols % 256:
        parser.error("--rows must be positive and --cols a positive multiple of 256 (the K-quants' super-block)")
    rows = measure(cases(args.rows, args.cols, args.seed), args.repeat)
    ratio_rows = ratios(rows)
    print(report(args.rows, args.cols, args.repeat, rows, ratio_rows))
    if args.json:
        doc = {
            "shape": [args.rows, args.cols],
            "repeat": args.repeat,
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "numpy": np.__version__, "cpus": os.cpu_count()},
            "cases": [asdict(r) | {"mtpc_mb_s": r.mtpc_mb_s, "reference_mb_s": r.reference_mb_s} for r in rows],
            "ratios": dict(ratio_rows),
        }
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
