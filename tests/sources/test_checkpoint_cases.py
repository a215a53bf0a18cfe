"""Bad checkpoints from `tests/cases/checkpoints/<case>/`: what `mtpc inspect` says about each.

Each case folder holds `make.py` (`make(tmp[, monkeypatch]) -> path`: writes the broken
checkpoint from the test fixtures, so no binary data is checked in) and `expected`:

    inspect exit N
    the first line of the message, with {source} for the path `make` returned

or `compile exit N` for what only compile reads (a checkpoint's tokenizer files: `inspect`, `check SPEC`
and `plan` read metadata only): the checkpoint is compiled by a minimal spec, `{spec}` in the message,
and nothing may be written.

A new case is a new folder; nothing here changes.
"""

from __future__ import annotations

import importlib.util
import inspect
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from mtpc.cli.main import main

CASES = Path(__file__).resolve().parents[1] / "cases" / "checkpoints"


def _cases() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if (p / "make.py").is_file())


def _load(case: Path):
    spec = importlib.util.spec_from_file_location(f"checkpoint_case_{case.name}", case / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.make


@pytest.mark.parametrize("case", _cases(), ids=lambda p: p.name)
def test_bad_checkpoint(case, tmp_path, monkeypatch):
    make = _load(case)
    kwargs = {"monkeypatch": monkeypatch} if "monkeypatch" in inspect.signature(make).parameters else {}
    source = make(tmp_path, **kwargs)
    monkeypatch.undo()  # the writer's patches end with the writing
    verb_line, message = (case / "expected").read_text().splitlines()[:2]
    verb, _, code = verb_line.split()
    argv, spec, package = [verb, str(source)], tmp_path / "case.yaml", tmp_path / "package"
    if verb == "compile":
        kind = "gguf" if source.suffix == ".gguf" else "hf"
        spec.write_text(f"mtpc: 1\nname: case\nsource: {{{kind}: '{source}'}}\n")
        argv = [verb, "-q", str(spec), "-o", str(package)]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        got = main(argv)
    first = err.getvalue().splitlines()[0] if err.getvalue() else ""
    assert (got, first) == (int(code), message.format(source=source, spec=spec)), err.getvalue()
    assert not package.exists()


def test_every_case_has_an_expectation():
    assert _cases() and all((case / "expected").is_file() for case in _cases())
