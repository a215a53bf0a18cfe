"""bench/tune_accuracy.py runs end to end on a tiny package and reports a row per draft count.

Only the shape of its report is checked: its numbers are timings, none is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tune_accuracy.py"


def test_the_bench_compares_prediction_and_measurement_for_every_draft_count(mixed, prompts_file, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), str(mixed), "--rounds", "1", "--new-tokens", "12", "--max-draft", "2",
         "--prompts", str(prompts_file), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["0", "1", "2"]
    (result,) = json.loads(out.read_text())["results"]
    for runs in (result["predicted"], result["measured"], result["predicted_cpu"], result["measured_cpu"]):
        assert sorted(runs) == ["0", "1", "2"] and all(len(v) == 1 and v[0] > 0 for v in runs.values())
    assert len(result["recommended"]) == 1
