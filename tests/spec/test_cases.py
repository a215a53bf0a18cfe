"""Data-driven spec cases: tests/cases/valid/*.yaml and specs/*.yaml must load and lower;
each tests/cases/invalid/<name>.yaml must fail to compile (through `mtpc.pipeline.driver.build`, so
refusals of the passes count too) with exactly the text in <name>.expected.

An .expected file starts with `exit: N` (the CLI's exit code), then the rendered
diagnostics, with the spec named relative to tests/ so the text is machine-independent.
"""

from pathlib import Path

import pytest

from mtpc.util.diagnostics import MtpcError
from mtpc.pipeline.driver import build
from mtpc.spec.loader import load_spec
from mtpc.spec.lower import lower

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
VALID = sorted((TESTS / "cases" / "valid").glob("*.yaml")) + sorted((REPO / "specs").glob("*.yaml"))
INVALID = sorted((TESTS / "cases" / "invalid").glob("*.yaml"))


def test_the_case_folders_are_not_empty():
    assert len(VALID) >= 6 and len(INVALID) >= 9
    for spec in INVALID:
        assert spec.with_suffix(".expected").is_file(), f"{spec.name} has no .expected file"


@pytest.mark.parametrize("path", VALID, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_valid_spec_loads_and_lowers(path):
    ir, info = lower(load_spec(path))
    assert ir.name == load_spec(path).data["name"]
    assert ir.main.num_hidden_layers == info.architecture.num_layers


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_spec_fails_with_the_expected_text(path, monkeypatch):
    monkeypatch.chdir(TESTS)
    with pytest.raises(MtpcError) as caught:
        build(path.relative_to(TESTS))
    expected = path.with_suffix(".expected").read_text(encoding="utf-8")
    got = f"exit: {int(caught.value.exit_code)}\n{caught.value}\n"
    assert got == expected


def test_the_shipped_specs_describe_the_tiny_model():
    from mtpc.ir import AttentionMode
    from tests.fixtures.arch import tiny_arch

    default, _ = lower(load_spec(REPO / "specs" / "qwen35-tiny-mtp.yaml"))
    assert default.architecture == tiny_arch()
    assert default.targets.onnxruntime_genai.execution_provider == "cpu"
    assert default.targets.onnxruntime_genai.attention is AttentionMode.DENSE
    assert default.targets.onnx_genai.layout == "flat"

    nohead, _ = lower(load_spec(REPO / "specs" / "qwen35-tiny-nohead.yaml"))
    assert nohead.architecture == tiny_arch(mtp_num_layers=0)

    paged, _ = lower(load_spec(REPO / "specs" / "qwen35-tiny-paged.yaml"))
    assert paged.architecture == tiny_arch()
    assert paged.precision.io_dtype == "float16"
    assert (paged.targets.onnxruntime_genai.execution_provider, paged.targets.onnxruntime_genai.attention) == (
        "cuda",
        AttentionMode.PAGED,
    )
