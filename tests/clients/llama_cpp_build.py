"""llama.cpp's C++ programs, built with cmake from the sources the llama-cpp-python sdist vendors
(`vendor/llama.cpp/`, the sdist tests/clients/llama_cpp.py fetches: same version, same sha256).

`build_tools(cache, targets, cmake_options)` builds `targets` once per machine into `cache/bin/`.
The build tree (`.<cache name>-build` beside the cache) survives an interrupted build, so the next
call continues it; the binaries are copied into `bin/` only once all are built, so `bin/` is what
says the cache is complete; one build at a time (a second caller waits, then finds the binaries).
Used by the llama.cpp runtime client (tests/clients/llama_cpp_runtime.py) and the benchmarks'
tools (bench/llama_bench_build.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Sequence, TextIO

from tests.clients import llama_cpp


def build_tools(cache: Path, targets: Sequence[str], cmake_options: Sequence[str], log: TextIO) -> dict[str, Path]:
    """{target: its binary in `cache/bin/`}, built first if any is absent (minutes on two cores)."""
    tools = {name: cache / "bin" / name for name in targets}
    if all(path.is_file() for path in tools.values()):
        return tools
    work = cache.parent / f".{cache.name}-build"
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(path.is_file() for path in tools.values()):
            _build(work, tools, cmake_options, log)
    return tools


def _build(work: Path, tools: dict[str, Path], cmake_options: Sequence[str], log: TextIO) -> None:
    src = work / "src"
    if not (src / "CMakeLists.txt").is_file():
        _extract_sources(work, src)
    out = work / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for command in (
        ["cmake", "-S", str(src), "-B", str(out), *generator, *cmake_options],
        ["cmake", "--build", str(out), "--target", *tools, "-j", str(os.cpu_count() or 1)],
    ):
        print("$ " + " ".join(command), file=log, flush=True)
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    for name, target in tools.items():
        built = next(p for p in out.rglob(name) if p.is_file() and os.access(p, os.X_OK))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target.with_suffix(".partial"))
        os.replace(target.with_suffix(".partial"), target)


def _extract_sources(work: Path, src: Path) -> None:
    """The sdist's `vendor/llama.cpp/` tree as `src`, whole or not at all."""
    with tempfile.TemporaryDirectory(dir=work) as download:
        sdist = llama_cpp._download(Path(download))
        prefix = f"llama_cpp_python-{llama_cpp.VERSION}/vendor/llama.cpp/"
        staging = Path(download) / "src"
        with tarfile.open(sdist, "r:gz") as archive:
            for member in archive.getmembers():
                if member.isfile() and member.name.startswith(prefix):
                    destination = staging / member.name[len(prefix):]
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    with archive.extractfile(member) as source, open(destination, "wb") as out:
                        shutil.copyfileobj(source, out)
        shutil.rmtree(src, ignore_errors=True)
        staging.rename(src)
