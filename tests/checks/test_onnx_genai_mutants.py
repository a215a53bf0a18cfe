"""`mtpc check` and onnx-genai's own checker agree on mutated onnx-genai metadata (onnx_genai_mutants.py).

Every mutant is applied to a copy of a package mtpc compiled (dense and MoE), and the same folder
goes to both: `mtpc check` must fail it (exit 1) with a finding at the edited field's file:line:col,
and ong-check (onnx-genai's metadata crate and engine validators at the profile's commit) must reject
it too, with the error the case names; the cases where ong-check passes a folder say why.

The upstream JSON Schemas (../shared/conformance/onnx-genai/) are a second, cheaper check of the same
edits. They see less than the crate, and where the two disagree the crate wins: the last test lists
every mutant the schemas let through that the crate refuses, and why a schema cannot see it.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

import mtpc
from mtpc.output.write import write_package
from mtpc.pipeline.driver import build
from tests.clients import onnx_genai
from tests.fixtures.package_files import remanifest
from tests.fixtures.shared import shared_file

from .onnx_genai_mutants import CONFIG, METADATA, MUTANTS, Mutant, prepare

REPO = Path(__file__).resolve().parents[2]
WORKFLOW_METADATA = REPO / "tests" / "cases" / "onnx_genai" / "workflow_inference_metadata.yaml"
BASES = {"dense": "qwen35-tiny-mtp", "moe": "qwen35moe-tiny-mtp"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("compiled")
    packages = {}
    for name, spec in BASES.items():
        write_package(build(REPO / "specs" / f"{spec}.yaml").artifacts, folder / name)
        packages[name] = folder / name
    return packages


def _cases() -> list:
    return [
        pytest.param(mutant, base, id=f"{mutant.id}-{base}")
        for mutant in MUTANTS
        for base in (("dense",) if mutant.base == "workflow" else tuple(BASES))
    ]


def _mutated(compiled, tmp_path, mutant: Mutant, base: str) -> Path:
    workflow = WORKFLOW_METADATA if mutant.base == "workflow" else None
    package = prepare(compiled[base], tmp_path / f"m{mutant.id}", workflow)
    mutant.apply(package)
    # As if written so: the finding at the mutated field is what fails the check, not the manifest's hash.
    return remanifest(package)


@pytest.mark.parametrize("mutant, base", _cases())
def test_mtpc_check_and_ong_check_both_refuse_the_mutant(compiled, tmp_path, mutant, base):
    package = _mutated(compiled, tmp_path, mutant, base)

    checked = mtpc.check(package)
    assert checked.exit_code == 1, [f.text() for f in checked.findings]
    at_field = [f for f in checked.findings if f.blocking and Path(f.file).name == Path(mutant.file).name
                and f.where == (mutant.pointer or "/") and mutant.message in f.message]
    assert at_field, f"no finding at {mutant.file}:{mutant.pointer} saying {mutant.message!r}: " + "\n".join(
        f.text() for f in checked.findings)
    assert at_field[0].line is not None and at_field[0].col is not None
    assert at_field[0].text().startswith(f"{at_field[0].file}:{at_field[0].line}:{at_field[0].col}: ")

    code, report = onnx_genai.run(package)
    if mutant.ong_check is None:
        assert mutant.why, "a mutant ong-check passes must say why mtpc refuses it anyway"
        assert code == 0, report
    else:
        assert code == 1, report
        assert any(mutant.ong_check in error for error in report["errors"]), report["errors"]


def test_the_compiled_packages_pass_both(compiled):
    for package in compiled.values():
        assert mtpc.check(package).exit_code == 0
        onnx_genai.assert_loads(package)


def test_a_workflow_package_passes_with_a_warning_that_its_head_is_never_used(compiled, tmp_path):
    """What mtpc wrote before: onnx-genai parses it (pipeline route) and never reads config.json."""
    package = prepare(compiled["dense"], tmp_path / "workflow", WORKFLOW_METADATA)
    checked = mtpc.check(package)
    assert checked.exit_code == 0
    (warning,) = [f for f in checked.findings if not f.blocking]
    assert warning.where == "/pipeline" and "never reads config.json's speculator_config" in warning.message
    code, report = onnx_genai.run(package)
    assert (code, report["layout"]) == (0, "workflow")
    assert report["route"] != onnx_genai.ENGINE_ROUTE


def test_the_corpus_covers_mutants_md():
    md = shared_file("conformance/onnx-genai-engine/MUTANTS.md").read_text(encoding="utf-8")
    numbered = {line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    assert numbered == {str(n) for n in range(1, 18)}
    assert {m.id.lstrip("0") for m in MUTANTS} >= numbered
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)


# ----------------------------------------------------------------------------- the upstream schemas: cheaper, blinder

# Mutants both upstream schemas let through although the crate (ong-check) refuses them, and why a
# schema cannot see them: here the crate wins. Every other crate-refused mutant must be refused by a schema.
SCHEMA_BLIND = {
    "01": "an output name of the main graph",
    "02": "the schema allows any hc_mult with BSH; the rule is the engine's validate_resolved_mtp_config",
    "03": "the schema allows hc_mult > 1 without mtp_state_output; the rule is the engine's",
    "04": "every SpeculatorConfig field is optional in the schema; resolve_mtp requires embedding",
    "05": "the schema allows an empty name; resolve_mtp refuses it",
    "06": "an initializer name of the main graph",
    "09": "the schema allows the layout to be omitted; the default then fails against the graph's rank-3 seed",
    "10": "a width of the main graph",
    "12": "accepted_prefix is a valid value; the engine refuses it when it builds the proposer",
    "13": "an output name of the sidecar graph",
    "14": "a file of the package",
    "15": "vocab_size is optional in the schema; native MTP requires it",
    "16": "a reference between workflow sections; the crate's validate_metadata resolves it",
    "20": "the schema lists capabilities, not what Engine::from_dir's default runtime admits",
    "21": "the files at the package root",
    "24": "the schema's model is any string; onnx-genai joins it to the package root",
}


def _upstream_refuses(package: Path) -> bool:
    metadata = yaml.safe_load((package / METADATA).read_text(encoding="utf-8"))
    # ac9c7dd's own schema (generated from the crate's types) for the metadata; the only upstream
    # definition of SpeculatorConfig is the older flat layout schema's, for config.json.
    at_commit = json.loads(shared_file("conformance/onnx-genai/workflow-layout.schema.json").read_text(encoding="utf-8"))
    if list(jsonschema.Draft202012Validator(at_commit).iter_errors(metadata)):
        return True
    flat = json.loads(shared_file("conformance/onnx-genai/flat-layout.schema.json").read_text(encoding="utf-8"))
    speculator = {"$schema": flat["$schema"], "$ref": "#/$defs/SpeculatorConfig", "$defs": flat["$defs"]}
    block = json.loads((package / CONFIG).read_text(encoding="utf-8")).get("speculator_config")
    return block is not None and bool(list(jsonschema.Draft202012Validator(speculator).iter_errors(block)))


def test_the_upstream_schemas_refuse_what_they_can_see_and_the_crate_wins_where_they_cannot(compiled, tmp_path):
    assert not _upstream_refuses(compiled["dense"])
    blind = set()
    for mutant in MUTANTS:
        package = _mutated(compiled, tmp_path, mutant, "dense")
        if not _upstream_refuses(package):
            blind.add(mutant.id)
    crate_refused_blind = {m.id for m in MUTANTS if m.id in blind and m.ong_check is not None}
    assert crate_refused_blind == set(SCHEMA_BLIND)
