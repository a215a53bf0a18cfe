"""llama.cpp's own HF -> GGUF converter, fetched from the llama-cpp-python source distribution.

The sdist on PyPI vendors llama.cpp, with `convert_hf_to_gguf.py`, its
`conversion/` package and its own `gguf-py/` under `vendor/llama.cpp/`. We
fetch it with pip (`--no-binary :all:`, so never a wheel), check its sha256,
and extract only those (and llama.cpp's LICENSE) into a per-user cache:

    ${MTPC_TEST_CACHE:-~/.cache/mtpc-tests}/llama-cpp-python-<version>/

The extraction goes to a temporary folder beside it that is renamed into place
when complete, so a killed run leaves no half cache (at most a hidden
`.llama-cpp-python-*` temporary folder, never taken for the cache). When the sdist cannot be
had the caller fails, it does not skip: these tests are the evidence that mtpc
reads what llama.cpp writes.

The converter runs in a subprocess of the current interpreter through
`convert_wrapper.py`, which settles the pre-tokenizer of our tiny tokenizers
(the converter only knows real models' tokenizers by hash).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

VERSION = "0.3.36"
# sha256 of llama_cpp_python-0.3.36.tar.gz as published on PyPI.
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
_VENDORED = "vendor/llama.cpp/"
# What the converter imports: the script, its model classes, and the gguf-py it puts first on sys.path.
_MEMBERS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/gguf/", "LICENSE")
WRAPPER = Path(__file__).with_name("convert_wrapper.py")


class ConverterUnavailable(RuntimeError):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("MTPC_TEST_CACHE") or Path.home() / ".cache" / "mtpc-tests")


def converter_tree() -> Path:
    """The cached llama.cpp tree holding `convert_hf_to_gguf.py`; fetched and extracted on first use."""
    target = cache_root() / f"llama-cpp-python-{VERSION}"
    if (target / "convert_hf_to_gguf.py").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as work:
        sdist = _download(Path(work))
        staging = Path(work) / "tree"
        _extract(sdist, staging)
        try:
            staging.rename(target)
        except OSError:
            # Another run got there first (rename onto a non-empty folder fails): use its copy.
            if not (target / "convert_hf_to_gguf.py").is_file():
                raise
    return target


def _download(work: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "-d", str(work), f"llama-cpp-python=={VERSION}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    sdists = sorted(work.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    if result.returncode != 0 or not sdists:
        raise ConverterUnavailable(
            f"could not download the llama-cpp-python {VERSION} sdist (it vendors llama.cpp's converter):\n"
            f"$ {' '.join(command)}\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )
    digest = hashlib.sha256(sdists[0].read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise ConverterUnavailable(f"{sdists[0].name} has sha256 {digest}, expected {SDIST_SHA256}")
    return sdists[0]


def _extract(sdist: Path, staging: Path) -> None:
    prefix = f"llama_cpp_python-{VERSION}/{_VENDORED}"
    with tarfile.open(sdist, "r:gz") as archive:
        members = [
            m for m in archive.getmembers()
            if m.isfile() and m.name.startswith(prefix) and m.name[len(prefix):].startswith(_MEMBERS)
        ]
        if not any(m.name.endswith("/convert_hf_to_gguf.py") for m in members):
            raise ConverterUnavailable(f"{sdist.name} has no {_VENDORED}convert_hf_to_gguf.py")
        for member in members:
            destination = staging / member.name[len(prefix):]
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.extractfile(member) as source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out)


def convert(hf_dir: Path, outputs: dict[str, Path], *, pre_tokenizer: str = "qwen35", two_files: Path | None = None,
            head_outtypes: tuple[str, ...] = ("f32",)) -> dict[str, Path]:
    """Run `convert_hf_to_gguf.py hf_dir --outtype T --outfile outputs[T]` for each T (one process).

    `two_files`: in the same process, also publish the model as two files into that folder (`published` finds them):
    `--outtype f32 --no-mtp` for the target and `--outtype T --mtp` for each head file, `--outfile` the folder, so
    the converter names each file itself (the head's `mtp-<model>-<type>.gguf`, from the model, not from the
    target's name)."""
    runs = [[str(hf_dir), "--outtype", outtype, "--outfile", str(outfile)] for outtype, outfile in outputs.items()]
    if two_files is not None:
        two_files.mkdir(parents=True, exist_ok=True)
        runs.append([str(hf_dir), "--outtype", "f32", "--outfile", str(two_files), "--no-mtp"])
        runs += [[str(hf_dir), "--outtype", t, "--outfile", str(two_files), "--mtp"] for t in head_outtypes]
    log = _run(runs, pre_tokenizer, list(outputs.values()))
    if two_files is not None:
        written = sorted(p.name for p in two_files.iterdir())
        if sum(not n.startswith("mtp-") for n in written) != 1 or sum(n.startswith("mtp-") for n in written) != len(head_outtypes):
            raise AssertionError(f"the converter wrote {written} into {two_files}:\n{log[-4000:]}")
    return outputs


@dataclass(frozen=True)
class TwoFiles:
    """A model published as two files: the target and its MTP head's own file of each outtype."""

    target: Path
    heads: dict[str, Path]


def published(folder: Path, head_outtypes: tuple[str, ...] = ("f32",)) -> TwoFiles:
    """The two files `convert(..., two_files=folder)` published, found by the converter's names."""
    files = sorted(folder.iterdir())
    heads = {t: next(p for p in files if p.name.startswith("mtp-") and p.stem.upper().endswith(f"-{t.upper()}"))
             for t in head_outtypes}
    (target,) = [p for p in files if not p.name.startswith("mtp-")]
    return TwoFiles(target, heads)


def _run(runs: list[list[str]], pre_tokenizer: str, expected: list[Path]) -> str:
    tree = converter_tree()
    command = [sys.executable, str(WRAPPER), str(tree), pre_tokenizer]
    for arguments in runs:
        command += ["--", *arguments]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # leave the cache as extracted
    env.pop("NO_LOCAL_GGUF", None)  # the converter must use its own gguf-py, as it does when run by hand
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    missing = [str(p) for p in expected if not p.is_file()]
    if result.returncode != 0 or missing:
        raise AssertionError(
            f"llama.cpp's converter failed (exit {result.returncode}; not written: {missing}):\n"
            f"$ {' '.join(command)}\n{result.stdout[-8000:]}"
        )
    return result.stdout
