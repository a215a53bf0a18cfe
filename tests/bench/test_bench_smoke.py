"""The compile bench runs end to end at its smallest size and reports every ratio.

Only the shape of the report is checked: timings depend on the machine, so none
is asserted.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compile_bench.py"
RATIO_ROWS = [
    "compile float32: time / copy time",
    "compile int4: time / copy time",
    "copy: peak RSS - import / largest tensor",
    "copy: peak anon - import / total weights",
    "compile float32: peak RSS - import / largest tensor",
    "compile float32: peak RSS - import / total weights",
    "compile float32: peak anon - import / largest tensor",
    "compile int4: peak RSS - import / largest tensor",
    "compile int4: peak anon - import / total weights",
]


def test_small_bench_reports_every_ratio(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--size", "small", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    printed = {line.rsplit(None, 1)[0].strip(): float(line.rsplit(None, 1)[1]) for line in done.stdout.splitlines()
               if ": " in line and line.startswith("  ")}
    doc = json.loads(out.read_text())
    for name in RATIO_ROWS:
        assert name in printed, f"no {name!r} row in:\n{done.stdout}"
        assert math.isfinite(doc["ratios"][name])
        assert round(doc["ratios"][name], 2) == printed[name]
    runs = {r["name"]: r for r in doc["runs"]}
    assert list(runs) == ["import", "copy", "compile float32", "compile int4"]
    # The copy writes exactly the checkpoint's tensor bytes; the packages hold real output.
    assert runs["copy"]["output_bytes"] == doc["weights"]["total_bytes"]
    assert runs["compile float32"]["output_bytes"] > runs["compile int4"]["output_bytes"] > 0
    assert all(r["peak_rss_bytes"] >= r["peak_anon_bytes"] > 0 for r in runs.values())


QUANT_BENCH = BENCH.parent / "quant_bench.py"
QUANT_CASES = ["quantize_linear int4", "quantize_linear int8", "gguf Q8_0", "gguf Q4_K", "gguf Q6_K"]


def test_tiny_quant_bench_reports_every_case(tmp_path):
    out = tmp_path / "quant.json"
    done = subprocess.run(
        [sys.executable, str(QUANT_BENCH), "--rows", "64", "--cols", "256", "--repeat", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    printed = {line.rsplit(None, 1)[0].strip(): float(line.rsplit(None, 1)[1]) for line in done.stdout.splitlines()
               if ": " in line and line.startswith("  ")}
    doc = json.loads(out.read_text())
    assert [c["name"] for c in doc["cases"]] == QUANT_CASES
    for case in QUANT_CASES:
        assert any(line.startswith(case) for line in done.stdout.splitlines()), f"no {case!r} row in:\n{done.stdout}"
        for ratio in ("time / reference time", "peak extra memory / input"):
            name = f"{case}: {ratio}"
            assert name in printed, f"no {name!r} row in:\n{done.stdout}"
            assert math.isfinite(doc["ratios"][name]) and doc["ratios"][name] > 0
            assert round(doc["ratios"][name], 2) == printed[name]
    # Each conversion's output is counted in its peak, so it is never zero; the inputs are the shape's bytes.
    cases = {c["name"]: c for c in doc["cases"]}
    assert cases["quantize_linear int4"]["input_bytes"] == 64 * 256 * 4
    assert all(c["peak_extra_bytes"] > 0 and c["mtpc_mb_s"] > 0 and c["reference_mb_s"] > 0 for c in doc["cases"])


def test_quant_bench_refuses_a_row_length_the_k_quants_cannot_hold():
    done = subprocess.run([sys.executable, str(QUANT_BENCH), "--cols", "100"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "multiple of 256" in done.stderr


def test_the_bench_readme_commands_name_the_readmes_venv_and_real_scripts():
    """Each command in bench/README.md runs a script that exists with the interpreter the README's set-up makes."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    venv = re.search(r"python3 -m venv (\S+)", (repo / "README.md").read_text(encoding="utf-8")).group(1)
    commands = re.findall(r"^(\S*python\S*) (bench/\S+\.py)", (repo / "bench" / "README.md").read_text(encoding="utf-8"), re.M)
    assert commands
    for interpreter, script in commands:
        assert interpreter == f"{venv}/bin/python", interpreter
        assert (repo / script).is_file(), script


def test_the_metadata_verbs_bench_runs_every_verb_on_both_27b_sources(tmp_path):
    """bench/metadata_verbs.py once per case: every verb answers on the 27B-shaped GGUF and HF folder (diff
    with exit 1: the specs differ), and prints the same in every run. Timings are not checked."""
    from bench.metadata_verbs import measure, summary

    rows = summary(measure(tmp_path, repeat=1))
    exits = {(kind, verb): r["exit"] for (_, kind, verb), r in rows.items()}
    assert exits == {("-", "--help"): 0, **{(kind, verb): int(verb == "diff") for kind in ("gguf", "hf")
                                            for verb in ("inspect", "check", "plan", "diff")}}
    assert all(r["stable"] for r in rows.values())
    diffs = {kind: rows[("this", kind, "diff")]["stdout"].decode() for kind in ("gguf", "hf")}
    for text in diffs.values():  # only the draft count and what records it differ; no graph
        assert "max_draft_tokens" in text and ".onnx" not in text
