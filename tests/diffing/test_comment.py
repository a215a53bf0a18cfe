"""The pull-request comment (diffing/comment.py) leads with the cause: what the spec changed comes first and is
never cut, however large the graph diff; two graphs' common rows are shown once; the rest shares the room."""

from __future__ import annotations

import re

import pytest

from mtpc.diffing.changes import ADDED, CHANGED, ByName, Change, sorted_changes
from mtpc.diffing.comment import GITHUB_COMMENT_LIMIT, comment_length, markdown
from mtpc.diffing.report import IR_FILE, SPEC_FIELDS, DiffReport
from mtpc.ir import ModelIR

IO_DTYPE = "| ✏️ | `/precision/io_dtype` | `\"float32\"` | `\"float16\"` |"


def _graph_rows(file: str, n: int, tag: str = "") -> list[Change]:
    """`n` rows that cannot group: every node's attribute changes to a value of its own."""
    return [Change(file, ("nodes", ByName(f"/n{tag}{i}x"), "attributes", "alpha"), CHANGED, f"old{i}", f"new{tag}{i}")
            for i in range(n)]


def _report(graph_rows: int) -> DiffReport:
    ir = [Change(IR_FILE, ("precision", "io_dtype"), CHANGED, "float32", "float16"),
          Change(IR_FILE, ("main", "contract", "inputs", "x", "dtype"), CHANGED, "float32", "float16")]
    graphs = [c for f in ("model.onnx", "decoder.onnx") for c in _graph_rows(f, graph_rows)]
    graphs += [Change("model.onnx", ("inputs", "ids", "dtype"), CHANGED, "int32", "int64")]
    return DiffReport("a.yaml", "b.yaml", tuple(sorted_changes(ir + graphs)))


@pytest.mark.parametrize("graph_rows", [10, 3_000, 12_000])  # 12,000 rows a graph: far more than a comment holds
def test_the_cause_is_never_cut_however_large_the_graph_diff(graph_rows):
    comment = markdown(_report(graph_rows))
    assert comment_length(comment) <= GITHUB_COMMENT_LIMIT
    assert comment.index(IO_DTYPE) < 2_000 and comment.count(IO_DTYPE) == 1
    assert "`/main/contract/inputs/x/dtype`" in comment  # the rest of the compiled spec is kept whole too
    assert comment.index("<code>&lt;ir&gt;</code>") < comment.index("<code>model.onnx</code> and <code>decoder.onnx")
    if graph_rows > 1_000:
        cut = re.search(r"(\d+) of (\d+) rows not shown", comment)
        assert cut and int(cut[2]) == graph_rows + 3, cut
        assert "`mtpc diff` without `--format markdown` prints every row; `--format json` lists every change." in comment


def test_rows_two_graphs_share_are_shown_once_for_both():
    comment = markdown(_report(10))
    shared = "| ✏️ | `/nodes[name=/n3x]/attributes/alpha` | `\"old3\"` | `\"new3\"` |"
    assert comment.count(shared) == 1
    assert ("<details><summary><code>model.onnx</code> and <code>decoder.onnx</code> · 🔴 major · the same 10 rows in "
            "both (one model for two runtimes)</summary>") in comment
    own = comment.split("<code>model.onnx</code> · 🔴 major · 11 changes: 10 rows above, with "
                        "<code>decoder.onnx</code>, and 1 row of its own</summary>")[1]
    assert own.split("</details>")[0].count("| ✏️ |") == 1 and "`/inputs/ids/dtype`" in own
    assert "<summary><code>decoder.onnx</code> · " not in comment  # no rows of its own: no section of its own


def test_graphs_that_share_few_rows_keep_their_own():
    rows = _graph_rows("model.onnx", 10) + _graph_rows("mtp/mtp.onnx", 10, "h") + _graph_rows("mtp/mtp.onnx", 2)
    comment = markdown(DiffReport("a", "b", tuple(sorted_changes(rows))))
    assert "</code> and <code>" not in comment and comment.count("/n1x]") == 2


def test_a_cut_comment_shows_every_files_first_rows():
    changes = [c for f in ("a.json", "b.json", "c.onnx") for c in
               (Change(f, ("k", f"key{i}"), CHANGED, f"old value {i}", f"new value {f} {i}") for i in range(2000))]
    comment = markdown(DiffReport("a", "b", tuple(sorted_changes(changes))))
    assert comment_length(comment) <= GITHUB_COMMENT_LIMIT
    for f in ("a.json", "b.json", "c.onnx"):
        assert f"| ✏️ | `/k/key0` | `\"old value 0\"` | `\"new value {f} 0\"` |" in comment


def test_a_cause_too_long_for_any_comment_is_cut_and_said():
    ir = [Change(IR_FILE, ("architecture", f"setting_{i}"), ADDED, None, f"kind {i} " * 20) for i in range(300)]
    comment = markdown(DiffReport("a", "b", tuple(sorted_changes(ir))), limit=6_000)
    assert comment_length(comment) <= 6_000 and "of the spec's change cut to fit a comment" in comment
    assert "in the spec's change." in comment


def test_a_package_diff_leads_with_the_spec_it_records():
    recorded = Change("provenance.json", ("spec", "lines", 5), CHANGED, "precision: {io_dtype: float32}",
                      "precision: {io_dtype: float16}")
    comment = markdown(DiffReport("pkg-a", "b.yaml", tuple(sorted_changes([recorded, *_graph_rows("model.onnx", 5000)]))))
    assert comment.index("precision: {io_dtype: float16}") < 1_000
    assert "(`provenance.json`, the spec as recorded; everything below follows from it)" in comment


def test_the_spec_fields_are_the_irs_fields_a_spec_writes():
    from dataclasses import fields

    from mtpc.schema.validation import load_schema

    written = set(load_schema("spec")["properties"]) & {f.name for f in fields(ModelIR)}
    assert set(SPEC_FIELDS) == written


def test_two_graphs_removed_are_two_changes_not_one_shared_row():
    from mtpc.diffing.changes import REMOVED

    removed = [Change(f, (), REMOVED) for f in ("decoder.onnx", "model.onnx")]
    comment = markdown(DiffReport("a", "b", tuple(sorted_changes(removed))))
    assert comment.count("| ➖ | file removed |  |  |") == 2 and "</code> and <code>" not in comment
