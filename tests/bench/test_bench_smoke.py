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
