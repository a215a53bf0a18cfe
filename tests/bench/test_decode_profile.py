"""bench/decode_profile.py on the tiny package: every node of the main graph is timed and summed
per op type, and the package's genai_config.json is left as it was."""

import subprocess
import sys
from pathlib import Path

import onnx
from tests.fixtures.onnx_nodes import every_node

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"


def test_the_profile_lists_every_op_type_of_the_main_graph(tmp_path):
    package = tmp_path / "pkg"
    subprocess.run([sys.executable, "-m", "mtpc", "compile", str(TINY), "-o", str(package), "-q"], check=True)
    config = (package / "genai_config.json").read_bytes()
    done = subprocess.run([sys.executable, str(REPO / "bench" / "decode_profile.py"), str(package), "--steps", "4", "--top", "1000"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (package / "genai_config.json").read_bytes() == config
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    counts = {r[0].lstrip("| "): int(r[1]) for r in rows if len(r) == 4 and r[1].isdigit()}
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph

    expected: dict[str, int] = {}
    for node in every_node(graph):
        expected[node.op_type] = expected.get(node.op_type, 0) + 1
    # onnxruntime's optimizer may fold constant nodes away, never add ops the graph lacks
    assert set(counts) <= set(expected) and counts["MatMul"] == expected["MatMul"]
    assert "3 decode steps" in done.stdout and "| /lm_head/MatMul | MatMul |" in done.stdout
    # the slowest-nodes table (all of them here) names each timed node once
    timed = [r for r in rows if len(r) == 3 and r[0].startswith("| /")]
    assert len(timed) == sum(counts.values())
