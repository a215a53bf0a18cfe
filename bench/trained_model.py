"""The Qwen3.5 trained here (models/qwen35-stdlib-mtp): what the benches that measure it share.

- `held_out()`: the held-out modules' source, read from this Python's standard library as the
  checkpoint's `training.json` lists it (its digest is checked: another Python's library is other
  text, and the bench says so instead of measuring on it silently);
- `prompts(count)`: openings of held-out code, each a few whole lines from a line start (the last one's
  newline left off), encoded by
  the checkpoint's own tokenizer (the canonical encoding of the text, so llama.cpp's tokenizer gives
  the same ids);
- `windows(count, length)`: held-out token windows, for teacher-forced measurements;
- `compile_package(work, name, body)`: a package of the checkpoint (or of `source`), compiled once
  per spec text under `work`.

Nothing here needs more than the committed checkpoint and the interpreter running it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "models" / "qwen35-stdlib-mtp"
SPEC = REPO / "specs" / "qwen35-stdlib-mtp.yaml"
PY = sys.executable


@functools.lru_cache(maxsize=None)
def record() -> dict:
    return json.loads((FOLDER / "training.json").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def held_out() -> tuple[tuple[str, str], ...]:
    """(path relative to the standard library, text) of every held-out file, in the recipe's order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = record()["held_out_files"]
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    if digest.hexdigest() != record()["held_out_digest"]:
        raise SystemExit(f"the held-out files under {root} are not the text the checkpoint was held out from "
                         f"(Python {record()['python']}'s standard library; this is {sys.version.split()[0]})")
    return tuple((rel, (root / rel).read_text(encoding="utf-8")) for rel in files)


@functools.lru_cache(maxsize=None)
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(FOLDER / "tokenizer.json"))


def prompts(count: int = 40, min_chars: int = 160, max_chars: int = 400) -> list[tuple[str, list[int]]]:
    """`count` openings of held-out code: whole lines from a line start with code on it (not a comment,
    not blank), at least `min_chars` long, spread evenly over the held-out files' lines."""
    starts = []
    for rel, text in held_out():
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped and not stripped.startswith("#") and i + 1 < len(lines):
                starts.append((lines, i))
    chosen = []
    for k in range(count):
        lines, i = starts[(2 * k + 1) * len(starts) // (2 * count)]
        text = ""
        while i < len(lines) and len(text) < min_chars:
            text += lines[i]
            i += 1
        # No final newline: llama.cpp's `-f` drops a prompt file's last one (common/arg.cpp), so both runtimes
        # get the same text only without it; the model then starts the next line itself.
        text = text[:max_chars].rstrip("\n")
        chosen.append((text, tokenizer().encode(text).ids))
    return chosen


def windows(count: int, length: int):
    """`count` windows of `length` + 1 held-out tokens `[count, length + 1]` (each file followed by
    <|endoftext|>, as in training), evenly spaced over the held-out stream."""
    import numpy as np

    stream = []
    for _, text in held_out():
        stream.extend(tokenizer().encode(text).ids)
        stream.append(0)
    stream = np.asarray(stream, np.int64)
    total = len(stream) // (length + 1)
    picks = [(2 * k + 1) * total // (2 * count) for k in range(min(count, total))]
    return np.stack([stream[p * (length + 1):(p + 1) * (length + 1)] for p in picks])


def compile_package(work: Path, name: str, body: str, source: str | None = None) -> Path:
    """Compile `body` (the spec's lines after `source`) for the checkpoint, or for `source` (a spec value);
    cached under `work` by the spec's text."""
    source = source or f"{{hf: {FOLDER}}}"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
    text = f"mtpc: 1\nname: {name}\nsource: {source}\n{body}"
    tag = hashlib.sha256(text.encode()).hexdigest()[:12]
    out = work / "packages" / f"{name}-{tag}"
    if not (out / "genai_config.json").is_file():
        spec = work / "specs" / f"{name}-{tag}.yaml"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(text, encoding="utf-8")
        print(f"compiling {name}", file=sys.stderr, flush=True)
        done = subprocess.run([PY, "-m", "mtpc", "compile", str(spec), "-o", str(out), "-q"],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"mtpc compile {spec} failed:\n{done.stderr[-4000:]}")
    return out


def gguf(work: Path, kind: str) -> Path:
    """llama.cpp's own GGUF of the checkpoint: its converter's `f32` (the weights exactly), or `llama-quantize`'s
    `Q4_K_M` / `Q4_0` of that file (the runtime is built once per machine: tests/clients/llama_cpp_runtime.py)."""
    sys.path.insert(0, str(REPO))
    from tests.clients import llama_cpp, llama_cpp_runtime

    folder = work / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    f32 = folder / "stdlib-f32.gguf"
    if not f32.is_file():
        print("llama.cpp: converting the checkpoint", file=sys.stderr, flush=True)
        llama_cpp.convert(FOLDER, {"f32": f32})  # the pre-tokenizer is Qwen3.5's split (tools/stdlib_mtp/tokenizer.py)
    if kind == "f32":
        return f32
    out = folder / f"stdlib-{kind.lower()}.gguf"
    if not out.is_file():
        llama_cpp_runtime.build()
        llama_cpp_runtime.quantize(f32, out, kind)
    return out
