"""A tune report read back (`mtpc.tuning.report.load_report`) and put in a model card (`compile --tune-report`).

tests/cases/tune/report.json is the JSON of one real `mtpc tune` run on a tiny fitted
package (its path replaced); tests/cases/tune/speed_section.md is the card section made
from it, checked here against the report's numbers by a reading of the Markdown table that
shares no code with the renderer. MTPC_UPDATE_GOLDEN=1 rewrites the golden.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.emit.speed_table import render_speed_section
from mtpc.schema.validation import errors as schema_errors
import mtpc
from mtpc.tuning.report import envelope, load_report

from .conftest import NEW_TOKENS, PROMPTS

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "tests" / "cases" / "tune" / "report.json"
GOLDEN = REPO / "tests" / "cases" / "tune" / "speed_section.md"
UPDATE = os.environ.get("MTPC_UPDATE_GOLDEN") == "1"


def test_the_fixed_report_is_a_valid_tune_report():
    assert schema_errors("tune_report", json.loads(REPORT.read_text("utf-8"))) == []


def test_the_card_section_from_a_fixed_report_is_the_golden():
    section = "\n".join(render_speed_section(load_report(REPORT))) + "\n"
    if UPDATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(section, encoding="utf-8")
    assert section == GOLDEN.read_text("utf-8")


def _significant(value: float, digits: int = 3) -> float:
    return round(value, digits - 1 - math.floor(math.log10(abs(value)))) if value else 0.0


def test_the_golden_table_says_what_the_report_says():
    report = json.loads(REPORT.read_text("utf-8"))
    rows = [line for line in GOLDEN.read_text("utf-8").splitlines() if re.match(r"\| \d", line)]
    assert len(rows) == len(report["predictions"])
    for line, row in zip(rows, report["predictions"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 4, line
        assert cells[0].split()[0] == str(row["draft"])
        assert ("(recommended)" in cells[0]) == (row["draft"] == report["recommendation"]["draft"])
        assert float(cells[1]) == pytest.approx(_significant(row["tokens_per_second"]), abs=0.5)
        assert cells[2] == f"{row['speedup']:.2f}x"
        if row["draft"]:
            assert cells[3] == f"{round(100 * row['accepted'] / row['proposed'])} %"
    text = GOLDEN.read_text("utf-8")
    assert f"`{report['recommendation']['spec_line']}`" in text
    for position in report["acceptance"]:
        assert f"draft {position['position']}: {round(100 * position['accepted'] / position['tried'])} %" in text
    assert f"{report['prompts']['generated_tokens']} generated tokens" in text and report["runtime"]["cpu"] in text


@pytest.mark.parametrize("text, where, message", [
    ('{"format_version": 1,\n  "command": "tune",,\n}', ":2:21:", "invalid JSON"),
    ("[]", ":1:1:", "is not of type 'object'"),
])
def test_a_broken_report_is_refused_at_its_line(tmp_path, text, where, message):
    from mtpc.util.diagnostics import MtpcError

    path = tmp_path / "report.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MtpcError) as raised:
        load_report(path)
    assert raised.value.exit_code == 2
    rendered = str(raised.value)
    assert f"{path}{where}" in rendered and message in rendered


def test_a_report_value_out_of_its_schema_is_refused_at_that_value(tmp_path):
    from mtpc.util.diagnostics import MtpcError

    doc = json.loads(REPORT.read_text("utf-8"))
    doc["predictions"][2]["tokens_per_second"] = -1
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if '"tokens_per_second": -1' in text)
    with pytest.raises(MtpcError) as raised:
        load_report(path)
    assert f"{path}:{line}:" in str(raised.value) and "/predictions/2/tokens_per_second" in str(raised.value)


@pytest.fixture(scope="module")
def sure_report_file(sure, tune_workdir) -> Path:
    result = mtpc.tune(sure, PROMPTS, prompts_source="prompts.txt", new_tokens=NEW_TOKENS, threads=1, sweeps=5)
    path = tune_workdir / "sure-report.json"
    path.write_text(json.dumps(envelope(result.body), indent=2), encoding="utf-8")
    return path


def test_compile_puts_the_measured_table_in_the_card(sure_report_file, tune_workdir, capsys):
    out = tune_workdir / "sure-with-card"
    assert main(["compile", "-q", str(tune_workdir / "sure.yaml"), "-o", str(out), "--tune-report", str(sure_report_file)]) == 0
    card = (out / "README.md").read_text("utf-8")
    assert "\n".join(render_speed_section(load_report(sure_report_file))) in card
    # The rest of the package is what compiling without the report gives.
    plain = tune_workdir / "sure-plain"
    assert main(["compile", "-q", str(tune_workdir / "sure.yaml"), "-o", str(plain)]) == 0
    for path in out.rglob("*"):
        if path.is_file() and path.name not in ("README.md", "manifest.json"):
            assert path.read_bytes() == (plain / path.relative_to(out)).read_bytes(), path
    # The manifests then differ in the card's entry alone.
    listed = [{f["name"]: f for f in json.loads((p / "manifest.json").read_text("utf-8"))["files"]} for p in (out, plain)]
    assert listed[0].pop("README.md") != listed[1].pop("README.md") and listed[0] == listed[1]
    assert main(["check", str(out)]) == 0
    # plan with the same report sees nothing to change; without it, only the card.
    capsys.readouterr()
    assert main(["plan", str(tune_workdir / "sure.yaml"), "--against", str(out), "--tune-report", str(sure_report_file), "--format", "json"]) == 0
    changed = [f["path"] for f in json.loads(capsys.readouterr().out)["files"] if f["action"] != "unchanged"]
    assert changed == []


def test_a_report_of_another_checkpoint_is_refused_and_nothing_is_written(sure_report_file, random_head, tune_workdir, capsys):
    out = tune_workdir / "random-with-card"
    assert main(["compile", "-q", str(tune_workdir / "random.yaml"), "-o", str(out), "--tune-report", str(sure_report_file)]) == 2
    err = capsys.readouterr().err
    assert "does not describe this package: it was measured on one compiled from another source checkpoint" in err
    assert not out.exists()


def test_a_report_of_other_stored_weights_is_refused(sure_report_file, tune_workdir, capsys):
    spec = tune_workdir / "sure-int4.yaml"
    shutil.copy(tune_workdir / "sure.yaml", spec)
    spec.write_text(spec.read_text("utf-8") + "quantization:\n  default: {bits: 4, block_size: 32}\n", encoding="utf-8")
    out = tune_workdir / "sure-int4"
    assert main(["compile", "-q", str(spec), "-o", str(out), "--tune-report", str(sure_report_file)]) == 2
    assert "with other stored weights" in capsys.readouterr().err
    assert not out.exists()


def test_changing_only_the_draft_count_keeps_the_report_valid(sure_report_file, tune_workdir):
    spec = tune_workdir / "sure-drafts.yaml"
    text = (tune_workdir / "sure.yaml").read_text("utf-8")
    spec.write_text(text.replace("max_draft_tokens: 4", "max_draft_tokens: 2"), encoding="utf-8")
    assert "max_draft_tokens: 2" in spec.read_text("utf-8")
    assert main(["compile", "-q", str(spec), "-o", str(tune_workdir / "sure-drafts"), "--tune-report", str(sure_report_file)]) == 0
