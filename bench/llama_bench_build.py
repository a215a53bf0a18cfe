"""llama.cpp's `llama-bench`, built once per machine from the llama-cpp-python sdist the tests use.

    python bench/llama_bench_build.py          # prints the binary's path; builds it first if absent

The sdist (same version and sha256 as tests/clients/llama_cpp.py) vendors llama.cpp's C++
sources under `vendor/llama.cpp/`. We configure it with cmake (CPU only, native
instructions, no curl, no tests or server) and build just the `llama-bench` target, which
takes a while on two cores, so the result is cached outside the repository:

    ${MTPC_BENCH_CACHE:-~/.cache/mtpc-bench}/llama.cpp-<version>/bin/llama-bench

The build happens in a temporary folder beside the cache that is renamed into place only
when it succeeded, so an interrupted build leaves no half binary behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.clients import llama_cpp  # noqa: E402  (the sdist's version, sha256 and download)

CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_OPENMP=OFF",
]


def cache_dir() -> Path:
    root = Path(os.environ.get("MTPC_BENCH_CACHE") or Path.home() / ".cache" / "mtpc-bench")
    return root / f"llama.cpp-{llama_cpp.VERSION}"


def binary() -> Path:
    return cache_dir() / "bin" / "llama-bench"


def llama_bench(log=sys.stderr) -> Path:
    """The cached llama-bench, built first if absent (minutes on two cores; the log shows cmake's output)."""
    target = binary()
    if target.is_file():
        return target
    cache = cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True)
    jobs = str(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix=f".{cache.name}-", dir=cache.parent) as work:
        work_dir = Path(work)
        sdist = llama_cpp._download(work_dir)
        prefix = f"llama_cpp_python-{llama_cpp.VERSION}/vendor/llama.cpp/"
        src = work_dir / "src"
        with tarfile.open(sdist, "r:gz") as archive:
            for member in archive.getmembers():
                if member.isfile() and member.name.startswith(prefix):
                    destination = src / member.name[len(prefix):]
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    with archive.extractfile(member) as source, open(destination, "wb") as out:
                        shutil.copyfileobj(source, out)
        build = work_dir / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        for command in (
            ["cmake", "-S", str(src), "-B", str(build), *generator, *CMAKE_OPTIONS],
            ["cmake", "--build", str(build), "--target", "llama-bench", "-j", jobs],
        ):
            print("$ " + " ".join(command), file=log, flush=True)
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
        built = next(p for p in build.rglob("llama-bench") if p.is_file())
        staging = work_dir / "cache"
        (staging / "bin").mkdir(parents=True)
        shutil.copy2(built, staging / "bin" / "llama-bench")
        try:
            staging.rename(cache)
        except OSError:  # another run got there first
            if not target.is_file():
                raise
    return target


if __name__ == "__main__":
    print(llama_bench())
