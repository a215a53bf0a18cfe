"""llama.cpp's own runtime (`llama-speculative-simple`) and quantizer (`llama-quantize`), built once per machine
from the llama-cpp-python sdist.

    python -m tests.clients.llama_cpp_runtime        # builds it (minutes on two cores), prints its path

The sdist is the one tests/clients/llama_cpp.py fetches for the converter (same version, same sha256),
which vendors llama.cpp's C++ sources under `vendor/llama.cpp/`. We configure them with cmake (CPU
only, no curl, no server or tests) and build one example, `llama-speculative-simple`: greedy
decoding with a draft, here llama.cpp's own MTP drafter (`--spec-type draft-mtp`), so one run
gives llama.cpp's greedy tokens and how many of its MTP head's drafts it accepted; and one tool,
`llama-quantize`, which writes the k-quant mixes (Q4_K_M, ...) people download: the converter itself
writes only f32 / f16 / bf16 / q8_0. The binaries are cached outside the repository:

    ${MTPC_TEST_CACHE:-~/.cache/mtpc-tests}/llama.cpp-<version>-runtime/bin/{llama-speculative-simple,llama-quantize}

Building it takes minutes, so outside CI the tests that use it skip with this command as the reason
when it is absent; when `CI` is set they build it first (a fresh CI machine has none) and fail if the
build fails.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.clients import llama_cpp
from tests.clients.llama_cpp_build import build_tools

TARGET = "llama-speculative-simple"
QUANTIZE = "llama-quantize"
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF", "-DGGML_OPENMP=OFF",
]
BUILD_COMMAND = "python -m tests.clients.llama_cpp_runtime"
RUNS = 8


def cache_dir() -> Path:
    return llama_cpp.cache_root() / f"llama.cpp-{llama_cpp.VERSION}-runtime"


def binary(target: str = TARGET) -> Path:
    return cache_dir() / "bin" / target


def build(log=sys.stderr, target: str = TARGET) -> Path:
    """The cached `target`, built first (with the other) if absent (tests/clients/llama_cpp_build.py)."""
    return build_tools(cache_dir(), [TARGET, QUANTIZE], CMAKE_OPTIONS, log)[target]


def quantize(source: Path, target: Path, kind: str) -> Path:
    """`source` (an f32 / f16 GGUF) quantized by llama.cpp's own `llama-quantize` to `kind` (e.g. "Q4_K_M")."""
    command = [str(binary(QUANTIZE)), str(source), str(target), kind, "1"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"$ {' '.join(command)}\nexit {result.returncode}\n{result.stderr[-4000:]}")
    return target


@dataclass(frozen=True)
class SpeculativeRun:
    text: bytes  # what llama.cpp generated, as the bytes of its tokens' pieces
    drafted: int
    accepted: int
    log: str


def speculative(model: Path, prompt: bytes, steps: int, max_draft: int, workdir: Path) -> SpeculativeRun:
    """Greedy decoding of `steps` tokens after `prompt` by llama.cpp with its MTP drafter.

    The prompt goes in as a file (its bytes tokenized by the GGUF's own tokenizer), with no BOS; the
    generated pieces come back on stdout, the draft counters on stderr."""
    prompt_file = workdir / "prompt.bin"
    prompt_file.write_bytes(prompt)
    command = [
        str(binary()), "-m", str(model), "-f", str(prompt_file), "-n", str(steps), "--temp", "0", "--top-k", "1",
        "--spec-type", "draft-mtp", "--spec-draft-n-max", str(max_draft), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0",
        "-c", "256", "-t", "1", "--seed", "0", "-lv", "5",  # debug lines: partial acceptances (see _head_counters)
        # Weights as stored: the repacked CPU buffers (AMX where the CPU has it) crash Q8_0 decoding with SIGSEGV /
        # SIGILL on a machine whose CPU lists AMX but does not grant its tile state (measured: llama.cpp 0.3.36,
        # plain decoding too); the block math is the same.
        "--no-repack",
    ]
    # llama.cpp's logger is a thread that is never flushed at exit (its common/log.cpp leaks it on purpose,
    # llama.cpp issue 22142), so a run may lose the tail of what it printed: the generated text and the
    # counters after it. They are printed in order through that one queue, so a run whose counters came
    # through printed all of its text; greedy decoding is deterministic, so such a run is the run.
    for _ in range(RUNS):
        result = subprocess.run(command, capture_output=True)
        log = result.stderr.decode("utf-8", "replace")
        if result.returncode != 0:
            raise AssertionError(f"$ {' '.join(command)}\nexit {result.returncode}\n{log[-6000:]}")
        if "n_accept" in log:
            return SpeculativeRun(result.stdout, *_head_counters(log), log)
    raise AssertionError(f"$ {' '.join(command)}\nprinted no draft counters in {RUNS} runs:\n{log[-6000:]}")


def _head_counters(log: str) -> tuple[int, int]:
    """(drafted, accepted): the head's own drafts and how many the target agreed with.

    A model whose context cannot drop a partial sequence (recurrent state: Qwen3.5, Qwen3-Next) verifies by
    checkpoint: on a partial acceptance of A of N drafts, llama-speculative-simple restores the checkpoint and
    re-runs the A accepted drafts plus the target's own token as a new draft, which is then fully accepted and
    counted (n_drafted and n_accept both += A + 1), and prints `partial acceptance: A < N` at debug level. The
    head's own counts undo that: each partial acceptance proposed N and had A accepted."""
    drafted, accepted = _counter(log, "n_drafted"), _counter(log, "n_accept")
    for line in log.splitlines():
        if "partial acceptance:" in line:
            a, n = (int(w) for w in line.split("partial acceptance:")[1].split(",")[0].split("<"))
            drafted += n - (a + 1)
            accepted -= 1
    return drafted, accepted


def _counter(log: str, name: str) -> int:
    for line in log.splitlines():
        words = line.replace("=", " ").split()
        if name in words:
            return int(words[words.index(name) + 1])
    raise AssertionError(f"llama.cpp printed no {name}:\n{log[-4000:]}")


if __name__ == "__main__":
    print(build())
