"""Golden `diff` / `plan` output (text and Markdown) for the changes a reviewer meets most.

Each case is a folder tests/cases/diff/<case>/ with two specs, a.yaml and b.yaml, and the
expected output of `mtpc diff a.yaml b.yaml` (diff.txt, diff.md), of `diff b.yaml a.yaml`
where the direction matters (reverse.txt, reverse.md) and of `plan b.yaml --against
<a's package>` (plan.txt, plan.md) where present. The goldens were read by hand when
accepted; they are not trusted for that alone: every case also reads both specs' graphs
with onnx itself and checks what the diff claims about them (which inputs and outputs
changed, how many nodes of which op, which attribute), so a wrong diff fails even after a
careless update.

To accept an intended change: MTPC_UPDATE_GOLDEN=1 python -m pytest tests/cli/test_diff_goldens.py
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import onnx
import pytest

import mtpc
from mtpc.cli.main import main
from mtpc.diffing.render import text as text_lines
from mtpc.diffing.render import GITHUB_COMMENT_LIMIT, comment_length
from mtpc.pipeline.driver import build
from tests.fixtures.onnx_nodes import every_node

CASES = Path(__file__).resolve().parents[1] / "cases" / "diff"
UPDATE = os.environ.get("MTPC_UPDATE_GOLDEN") == "1"


@functools.lru_cache(maxsize=None)
def graphs(spec: Path) -> dict[str, onnx.ModelProto]:
    """The graph protos a spec compiles to, parsed by onnx (weights stay unread)."""
    with build(spec) as result:
        return {a.relpath: onnx.load_model_from_string(a.content) for a in result.artifacts if a.relpath.endswith(".onnx")}


def ports(model: onnx.ModelProto, side: str) -> dict[str, tuple]:
    values = model.graph.input if side == "inputs" else model.graph.output
    return {v.name: (v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values}


def interface_counts(old: onnx.ModelProto, new: onnx.ModelProto, side: str) -> tuple[int, int, int]:
    """(added, removed, changed) ports, from onnx alone."""
    a, b = ports(old, side), ports(new, side)
    return len(b.keys() - a.keys()), len(a.keys() - b.keys()), sum(1 for n in a.keys() & b.keys() if a[n] != b[n])


def claimed(side: str, counts: tuple[int, int, int]) -> str:
    """How the severity line writes those counts: `inputs +4 -1 ~8`."""
    return f"{side} " + " ".join(f"{sign}{n}" for sign, n in zip("+-~", counts) if n)


def ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def assert_op_rows(graph: str, old: onnx.ModelProto, new: onnx.ModelProto, lines: list[str]) -> None:
    """The operator histogram rows are exactly the op counts onnx reads off the two graphs."""
    qualified = lambda m: Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"  # noqa: E731
                                  for n in every_node(m.graph))
    a, b = qualified(old), qualified(new)
    expected = set()
    for op in a.keys() | b.keys():
        if op not in b:
            expected.add(f"- {graph}:/ops/{op} (was {a[op]})")
        elif op not in a:
            expected.add(f"+ {graph}:/ops/{op} = {b[op]}")
        elif a[op] != b[op]:
            expected.add(f"~ {graph}:/ops/{op}: {a[op]} -> {b[op]}")
    assert {line for line in lines if line[2:].startswith(f"{graph}:/ops/")} == expected


def run(capsys, *argv) -> str:
    main(list(argv))
    return capsys.readouterr().out


def check_golden(case: str, name: str, text: str) -> None:
    path = CASES / case / name
    if UPDATE:
        path.write_text(text)
    assert path.is_file(), f"no golden {path}; create it with MTPC_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs; review, then accept with MTPC_UPDATE_GOLDEN=1"


@pytest.fixture
def case_dir(tmp_path, monkeypatch, request):
    """The case's specs copied to a temporary folder that is the working directory, so paths print short."""
    case = request.param
    for spec in ("a.yaml", "b.yaml"):
        shutil.copyfile(CASES / case / spec, tmp_path / spec)
    monkeypatch.chdir(tmp_path)
    return case


def plan_outputs(case: str, capsys) -> str:
    """`plan b.yaml --against` the package of a.yaml, text and Markdown, against their goldens."""
    assert main(["compile", "-q", "a.yaml", "-o", "pkg-a"]) == 0
    capsys.readouterr()
    plan = run(capsys, "plan", "-q", "b.yaml", "--against", "pkg-a")
    check_golden(case, "plan.txt", plan)
    md = run(capsys, "plan", "-q", "--format", "markdown", "b.yaml", "--against", "pkg-a")
    check_golden(case, "plan.md", md)
    assert len(md) <= GITHUB_COMMENT_LIMIT
    return plan


def diff_outputs(case: str, capsys, old="a.yaml", new="b.yaml", stem="diff") -> tuple[str, str]:
    text = run(capsys, "diff", old, new)
    md = run(capsys, "diff", "--format", "markdown", old, new)
    check_golden(case, f"{stem}.txt", text)
    check_golden(case, f"{stem}.md", md)
    assert len(md) <= comment_length(md) <= GITHUB_COMMENT_LIMIT
    return text, md


@pytest.mark.parametrize("case_dir", ["block_size"], indirect=True)
def test_block_size_change(case_dir, capsys, tmp_path):
    text, md = diff_outputs(case_dir, capsys)
    a, b = graphs(CASES / case_dir / "a.yaml"), graphs(CASES / case_dir / "b.yaml")
    lines = text.splitlines()
    for graph in ("model.onnx", "mtp/mtp.onnx"):
        nbits = [(n, m) for n, m in zip(a[graph].graph.node, b[graph].graph.node) if n.op_type == "MatMulNBits"]
        block = lambda node: next(x.i for x in node.attribute if x.name == "block_size")  # noqa: E731
        assert nbits and {(block(n), block(m)) for n, m in nbits} == {(32, 64)}
        # Same interface and the same nodes on both sides: an attribute change, minor.
        assert ports(a[graph], "inputs") == ports(b[graph], "inputs") and ports(a[graph], "outputs") == ports(b[graph], "outputs")
        assert ops(a[graph]) == ops(b[graph])
        assert_op_rows(graph, a[graph], b[graph], lines)
        assert f"  minor     {graph}: attributes and initializers changed" in lines
        rows = [line for line in lines if line.startswith(f"~ {graph}:/nodes[") and "/attributes/block_size: 32 -> 64" in line]
        assert len(rows) == 1 and rows[0].endswith(f" ×{len(nbits)}")
    assert lines[0] == "severity: minor"
    # The overrides keep lm_head and mtp.fc float: no block_size of theirs may show.
    assert "<ir>:/quantization/overrides" not in text
    assert not [line for line in lines if "[name=lm_head" in line or "[name=mtp.fc" in line]
    assert "🔵 minor" in md and "<details>" in md

    plan = plan_outputs(case_dir, capsys)
    assert "  ~ model.onnx  (change, minor: attributes and initializers changed)" in plan
    assert "  ~ model.onnx.data  (change, minor: bytes differ)" in plan
    assert "      note: weights' stored forms: see `model.onnx` and `quantization.json`" in plan
    assert main(["plan", "--format", "json", "b.yaml", "--against", "pkg-a"]) == 0
    doc = json.loads(capsys.readouterr().out)
    files = {f["path"]: f for f in doc["files"]}
    assert doc["format_version"] == 1 and doc["severity"] == "minor"
    assert files["model.onnx"]["severity"] == "minor" and files["genai_config.json"] == {"path": "genai_config.json", "action": "unchanged"}
    rows = {r["path"]: r for r in files["model.onnx"]["rows"]}
    nbits = sum(1 for n in a["model.onnx"].graph.node if n.op_type == "MatMulNBits")
    assert rows["/nodes[name=/layers.{0..3}/*/MatMul]/attributes/block_size"] == {
        "file": "model.onnx", "path": "/nodes[name=/layers.{0..3}/*/MatMul]/attributes/block_size",
        "kind": "changed", "count": nbits, "old": 32, "new": 64,
    }


@pytest.mark.parametrize("case_dir", ["io_dtype_64_layers"], indirect=True)
def test_io_dtype_change_on_64_layers_is_grouped_and_fits_a_comment(case_dir, capsys):
    text, md = diff_outputs(case_dir, capsys)
    a, b = graphs(CASES / case_dir / "a.yaml")["model.onnx"], graphs(CASES / case_dir / "b.yaml")["model.onnx"]
    inputs, outputs = interface_counts(a, b, "inputs"), interface_counts(a, b, "outputs")
    assert inputs == (0, 0, 128) and outputs[:2] == (0, 0)
    lines = text.splitlines()
    assert f"  major     model.onnx: interface changed: {claimed('inputs', inputs)}, {claimed('outputs', outputs)}" in lines
    present = [n for n, (t, _) in ports(b, "outputs").items() if n.startswith("present.") and t == onnx.TensorProto.FLOAT16]
    assert len(present) == 128
    assert f'~ model.onnx:/outputs[name=present.{{0..63}}.*]/dtype: "float32" -> "float16" ×{len(present)}' in lines
    assert f"~ model.onnx:/ops/Cast: {ops(a)['Cast']} -> {ops(b)['Cast']}" in lines
    assert_op_rows("model.onnx", a, b, lines)
    # Grouped: thousands of changes, a few pages of rows; the Markdown is far below GitHub's limit. On
    # cpu a float16 graph keeps fewer fused kernels than a float32 one (profiles/kernels.py), so the
    # diff also shows the kernel swap in every layer; the residual chain's rows name two neighbouring
    # layers each (`/layers.N/input_layernorm` reads `/layers.N-1/...`), which the grouping does not
    # fold: about 340 rows, 120 before the fused kernels.
    changes = int(re.search(r"(\d+) differences", lines[-1]).group(1))
    assert changes > 2000 and len(lines) < 700
    # The comment leads with the cause, and shows once what model.onnx and onnx-genai's decoder.onnx (the same model
    # for two runtimes) change alike; before, it listed both files' rows and was cut at GitHub's limit, the cause with them.
    cause = '| ✏️ | `/precision/io_dtype` | `"float32"` | `"float16"` |'
    assert md.index(cause) < 2_000 and comment_length(md) <= GITHUB_COMMENT_LIMIT and "Cut to fit" not in md
    decoder = graphs(CASES / case_dir / "b.yaml")["decoder.onnx"]  # unwindowed state, the same dtypes
    dtypes = lambda model, side: {n: t for n, (t, _) in ports(model, side).items()}  # noqa: E731
    assert all(dtypes(decoder, side) == dtypes(b, side) for side in ("inputs", "outputs"))
    present = '| ✏️ | `/outputs[name=present.{0..63}.*]/dtype` ×128 | `"float32"` | `"float16"` |'
    assert md.count(present) == 1 and md.index("<code>decoder.onnx</code> and <code>model.onnx</code>") < md.index(present)
    assert text.count('.onnx:/outputs[name=present.{0..63}.*]/dtype: "float32" -> "float16" ×128') == 2
    plan = plan_outputs(case_dir, capsys)
    assert f"  ~ model.onnx  (change, major: interface changed: {claimed('inputs', inputs)}, {claimed('outputs', outputs)})" in plan
    plan_md = (CASES / case_dir / "plan.md").read_text()
    assert plan_md.index('`"precision: {io_dtype: float16}"`') < 2_000  # the spec's text, as the package recorded it


@pytest.mark.parametrize("case_dir", ["head"], indirect=True)
def test_head_removed_and_added(case_dir, capsys):
    removed, _ = diff_outputs(case_dir, capsys)
    added, _ = diff_outputs(case_dir, capsys, "b.yaml", "a.yaml", stem="reverse")
    a, b = graphs(CASES / case_dir / "a.yaml"), graphs(CASES / case_dir / "b.yaml")
    assert "mtp/mtp.onnx" in a and "mtp/mtp.onnx" not in b
    counts = interface_counts(a["model.onnx"], b["model.onnx"], "outputs")
    assert set(ports(a["model.onnx"], "outputs")) - set(ports(b["model.onnx"], "outputs")) == {"hidden_states"}
    assert removed.splitlines()[:3] == [
        "severity: major",
        f"  major     model.onnx: interface changed: {claimed('outputs', counts)}",
        "  major     mtp/mtp.onnx: graph removed",
    ]
    back = interface_counts(b["model.onnx"], a["model.onnx"], "outputs")
    assert added.splitlines()[:3] == [
        "severity: major",
        f"  major     model.onnx: interface changed: {claimed('outputs', back)}",
        "  major     mtp/mtp.onnx: graph added",
    ]
    assert_op_rows("model.onnx", a["model.onnx"], b["model.onnx"], removed.splitlines())
    assert "- model.onnx:/outputs[name=hidden_states]" in removed and "+ model.onnx:/outputs[name=hidden_states]" in added
    # The added head's interface, port by port (rows may stand for several: count them).
    for side in ("inputs", "outputs"):
        rows = [line for line in added.splitlines() if line.startswith(f"+ mtp/mtp.onnx:/{side}[name=")]
        count = sum(int(m.group(1)) if (m := re.search(r" ×(\d+)$", line)) else 1 for line in rows)
        assert count == len(ports(a["mtp/mtp.onnx"], side)) > 0
    # The Python API gives the same report the CLI prints.
    report = mtpc.diff("a.yaml", "b.yaml").report
    assert text_lines(report) == removed.splitlines()
    plan = plan_outputs(case_dir, capsys)
    assert "  - mtp/mtp.onnx  (remove)" in plan and "  - mtp/mtp.onnx.data  (remove)" in plan


@pytest.mark.parametrize("case_dir", ["attention_paged"], indirect=True)
def test_dense_to_paged_attention_is_a_major_interface_change(case_dir, capsys):
    text, md = diff_outputs(case_dir, capsys)
    a, b = graphs(CASES / case_dir / "a.yaml"), graphs(CASES / case_dir / "b.yaml")
    lines = text.splitlines()
    assert lines[0] == "severity: major"
    for graph in ("model.onnx", "mtp/mtp.onnx"):
        inputs, outputs = interface_counts(a[graph], b[graph], "inputs"), interface_counts(a[graph], b[graph], "outputs")
        assert inputs[0] and inputs[1]  # paged I/O adds inputs (block table, ...) and drops others
        parts = ", ".join(claimed(side, c) for side, c in (("inputs", inputs), ("outputs", outputs)) if any(c))
        assert f"  major     {graph}: interface changed: {parts}" in lines
        for name in ports(b[graph], "inputs").keys() - ports(a[graph], "inputs").keys():
            assert any(line.startswith(f"+ {graph}:/inputs[name={name}]") for line in lines), name
        assert ops(a[graph])["GroupQueryAttention"] and not ops(b[graph])["GroupQueryAttention"]
        assert ops(b[graph])["PagedAttention"] and not ops(a[graph])["PagedAttention"]
        assert_op_rows(graph, a[graph], b[graph], lines)
    assert "**🔴 major**" in md
    plan = plan_outputs(case_dir, capsys)
    assert "severity: major" in plan.splitlines()
