"""llama.cpp's tools (`llama-bench`, `llama-quantize`, `llama-speculative-simple`), built once per machine
from the llama-cpp-python sdist the tests use.

    python bench/llama_bench_build.py          # prints the binaries' paths; builds them first if absent

The sdist (same version and sha256 as tests/clients/llama_cpp.py) vendors llama.cpp's C++
sources under `vendor/llama.cpp/`. We configure it with cmake (CPU only, native
instructions, no curl, no tests or server) and build just `llama-bench`, `llama-quantize`
(which makes the Q4_0 file from the converter's output) and the `llama-speculative-simple`
example (greedy speculative decoding, `--spec-type draft-mtp` for a GGUF's MTP head), which
takes a while on two cores, so the result is cached outside the repository:

    ${MTPC_BENCH_CACHE:-~/.cache/mtpc-bench}/llama.cpp-<version>/bin/{llama-bench,llama-quantize,llama-speculative-simple}

`llama_cpp_python()` gives llama-cpp-python itself (the Python bindings over the same llama.cpp,
for logits at every position: bench/kquant_numerics.py), built by pip from the same sdist (its
sha256 checked) into `${MTPC_BENCH_CACHE:-~/.cache/mtpc-bench}/llama-cpp-python-<version>/`
with its one missing dependency, diskcache; tens of minutes on two cores, once.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.clients import llama_cpp  # noqa: E402  (the sdist's version, sha256 and download)
from tests.clients.llama_cpp_build import build_tools  # noqa: E402

CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_OPENMP=OFF",
]


# Examples are configured (speculative-simple is one) but only these targets are built.
TARGETS = ("llama-bench", "llama-quantize", "llama-speculative-simple")


def cache_dir() -> Path:
    root = Path(os.environ.get("MTPC_BENCH_CACHE") or Path.home() / ".cache" / "mtpc-bench")
    return root / f"llama.cpp-{llama_cpp.VERSION}"


def binary(name: str = "llama-bench") -> Path:
    return cache_dir() / "bin" / name


def llama_tools(log=sys.stderr) -> dict[str, Path]:
    """The cached tools of TARGETS, built first if absent (minutes on two cores; tests/clients/llama_cpp_build.py)."""
    return build_tools(cache_dir(), TARGETS, CMAKE_OPTIONS, log)


def llama_bench(log=sys.stderr) -> Path:
    return llama_tools(log)["llama-bench"]


# The bindings' library alone: CPU, native instructions, no multimodal (llava / mtmd) library, no tools.
PYTHON_CMAKE_ARGS = (
    "-DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF "
    "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF"
)


def llama_cpp_python(log=sys.stderr):
    """The `llama_cpp` module of llama-cpp-python, built first if absent (see the module's docstring)."""
    target = cache_dir().parent / f"llama-cpp-python-{llama_cpp.VERSION}"
    if not (target / "llama_cpp").is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / "llama_cpp").is_dir():
                _pip_build(target, log)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    import llama_cpp as bindings

    return bindings


def _pip_build(target: Path, log) -> None:
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as work:
        staging = Path(work) / "tree"
        pinned = Path(work) / "requirements.txt"
        pinned.write_text(f"llama-cpp-python=={llama_cpp.VERSION} --hash=sha256:{llama_cpp.SDIST_SHA256}\n")
        pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--target", str(staging)]
        env = dict(os.environ, CMAKE_ARGS=PYTHON_CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 1))
        for command in (pip + ["--no-binary", "llama-cpp-python", "--require-hashes", "-r", str(pinned)],
                        pip + ["diskcache==5.6.3"]):
            print("$ " + " ".join(command), file=log, flush=True)
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
        staging.rename(target)


if __name__ == "__main__":
    for tool in llama_tools().values():
        print(tool)
