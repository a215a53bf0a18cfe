"""`mtpc.verify` is what `mtpc verify` runs: for the same arguments its result's exit code is the command's, and
its `to_json()` is the command's JSON body, on a good package (0), a package checked with the wrong spec (1) and a
paged package this CPU cannot run (2). What stops verify before it has a result raises, with the command's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mtpc
from mtpc.cli.main import main
from mtpc.util.diagnostics import MtpcError

SPECS = Path(__file__).resolve().parents[2] / "specs"
TINY, NOHEAD, PAGED = (SPECS / f"qwen35-tiny-{name}.yaml" for name in ("mtp", "nohead", "paged"))


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("verify-api")
    return {spec.stem: mtpc.compile(spec, folder / spec.stem).output for spec in (TINY, PAGED)}


def command(package: Path, spec: Path, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["verify", str(package), "--spec", str(spec), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("package, spec, expected", [
    ("qwen35-tiny-mtp", TINY, 0),  # verified
    ("qwen35-tiny-mtp", NOHEAD, 1),  # the wrong spec: a mismatch
    ("qwen35-tiny-paged", PAGED, 2),  # CUDA-only: static checks pass, nothing ran
], ids=["good", "wrong-spec", "paged"])
def test_the_api_gives_the_commands_exit_code_and_report(packages, package, spec, expected, capsys):
    result = mtpc.verify(packages[package], spec)
    code, body = command(packages[package], spec, capsys)
    assert result.exit_code == code == expected
    assert result.ok is (expected == 0)
    assert {k: v for k, v in body.items() if k not in ("format_version", "command")} == result.to_json()


def test_a_paged_package_verified_static_only_is_ok_in_both(packages, capsys):
    result = mtpc.verify(packages["qwen35-tiny-paged"], PAGED, static_only=True)
    code, _ = command(packages["qwen35-tiny-paged"], PAGED, capsys, "--static-only")
    assert result.exit_code == code == 0 and result.steps == ("static checks",) and result.greedy is None


def test_the_good_package_reports_tokens_and_acceptance(packages):
    result = mtpc.verify(packages["qwen35-tiny-mtp"], TINY, draft_tokens=3, new_tokens=6)
    assert result.ok and result.verdict == "verify: ok"
    assert len(result.greedy) == 6 and result.speculative == result.greedy == result.reference_greedy
    assert result.stats["draft_tokens_proposed"] > 0 and result.acceptance_rate is not None


def test_the_default_specs_fitted_head_has_its_drafts_accepted(packages):
    """specs/qwen35-tiny-mtp.yaml's head is fitted (`mtp_head: fitted`): verify's defaults see most drafts accepted,
    counted by onnxruntime-genai's own MtpGenerator, and speculative decoding still gives greedy's tokens."""
    result = mtpc.verify(packages["qwen35-tiny-mtp"], TINY)
    assert result.ok and result.speculative == result.greedy
    assert result.stats["draft_tokens_accepted"] > 0 and result.acceptance_rate >= 0.5


@pytest.mark.parametrize("arguments", [
    {"prompt": []}, {"prompt": [-1]}, {"new_tokens": 0}, {"draft_tokens": 17}, {"atol": -1.0},
])
def test_arguments_the_command_would_refuse_raise_a_usage_error(packages, arguments):
    with pytest.raises(MtpcError) as raised:
        mtpc.verify(packages["qwen35-tiny-mtp"], TINY, **arguments)
    assert raised.value.exit_code == 2


def test_a_folder_that_is_not_a_package_raises_as_the_command_exits(tmp_path, capsys):
    with pytest.raises(MtpcError) as raised:
        mtpc.verify(tmp_path, TINY)
    assert raised.value.exit_code == main(["verify", "-q", str(tmp_path), "--spec", str(TINY)]) == 2
