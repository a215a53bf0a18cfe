"""bench/mtp_speedup.py runs end to end on its small checkpoint and prints every row of its table.

Only the report's shape and what does not depend on timing are checked: every head at every
precision and N, plain and speculative tokens equal for float32, the best head's drafts all
accepted and the worst's none.
"""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mtp_speedup.py"


def test_small_speculative_bench_prints_every_row(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--size", "small", "--steps", "12", "--repeats", "1", "--threads", "1",
         "--drafts", "1,4", "--only", "og", "--work", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(out.read_text())["onnxruntime_genai"]
    assert {(r["precision"], r["head"], r["drafts"]) for r in rows} == {
        (p, h, n) for p in ("fp32", "int4") for h in ("best", "worst", "realistic") for n in (0, 1, 4)}
    by = {(r["precision"], r["head"], r["drafts"]): r for r in rows}
    for precision in ("fp32", "int4"):
        assert by[(precision, "best", 4)]["acceptance"] == [1.0, 1.0, 1.0, 1.0]
        assert by[(precision, "worst", 1)]["acceptance"] == [0.0]
    assert all(r["equal"] for r in rows if r["precision"] == "fp32")
    assert "| goal (1 thread) | measured | |" in done.stdout and "| fp32 | 1 | realistic | 4 |" in done.stdout
