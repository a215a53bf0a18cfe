"""Grouping repeated changes, severity per file, and the Markdown cap, on hand-written changes."""

from __future__ import annotations

from mtpc.diffing.groups import group_changes, number_set
from mtpc.diffing.render import GITHUB_COMMENT_LIMIT, comment_length, markdown, text
from mtpc.diffing.report import DiffReport, file_verdict
from mtpc.diffing.changes import ADDED, ByName, CHANGED, Change, REMOVED, sorted_changes


def test_number_sets_read_as_ranges_steps_or_runs():
    assert number_set([7]) == "7"
    assert number_set([1, 0]) == "{0,1}"
    assert number_set(list(range(64))) == "{0..63}"
    assert number_set(list(range(1, 64, 2))) == "{1,3,…,63}"
    assert number_set([0, 4, 8]) == "{0,4,8}"
    assert number_set([0, 1, 2, 3, 5, 9, 10, 11]) == "{0..3,5,9..11}"


def dtype_change(file, side, name):
    return Change(file, (side, ByName(name), "dtype"), CHANGED, "float32", "float16")


def test_same_change_in_every_layer_is_one_row_with_a_count():
    changes = [dtype_change("m.onnx", "inputs", f"past_key_values.{i}.{kv}") for i in range(64) for kv in ("key", "value")]
    changes.append(dtype_change("m.onnx", "inputs", "input_ids"))  # no number: stays its own row
    groups = group_changes(sorted_changes(changes))
    assert [g.render() for g in groups] == [
        '~ m.onnx:/inputs[name=input_ids]/dtype: "float32" -> "float16"',
        '~ m.onnx:/inputs[name=past_key_values.{0..63}.*]/dtype: "float32" -> "float16" ×128',
    ]
    assert groups[1].to_json() == {
        "file": "m.onnx", "path": "/inputs[name=past_key_values.{0..63}.*]/dtype", "kind": "changed",
        "count": 128, "old": "float32", "new": "float16",
    }


def test_different_values_or_keys_are_not_merged():
    changes = [
        dtype_change("m.onnx", "inputs", "past.0.conv"),
        Change("m.onnx", ("inputs", ByName("past.1.conv"), "dtype"), CHANGED, "float32", "bfloat16"),
        Change("m.onnx", ("inputs", ByName("past.2.conv"), "shape"), CHANGED, "[1]", "[2]"),
    ]
    assert len(group_changes(sorted_changes(changes))) == 3


def test_rewired_nodes_of_every_layer_group_with_their_layer_in_the_values():
    changes = [
        Change("m.onnx", ("nodes", ByName(f"/layers.{i}/Add"), "inputs", 0), CHANGED, f"/layers.{i}/x/output_0", f"/layers.{i}/Cast/output_0")
        for i in range(4)
    ]
    [group] = group_changes(sorted_changes(changes))
    assert group.render() == '~ m.onnx:/nodes[name=/layers.{0..3}/Add]/inputs/0: "/layers.{0..3}/x/output_0" -> "/layers.{0..3}/Cast/output_0" ×4'


def test_added_nodes_group_by_place_and_op_whatever_else_they_hold():
    changes = [Change("m.onnx", ("nodes", ByName(f"/layers.{i}/Cast")), ADDED, new={"op": "Cast", "inputs": [f"x{i}"]}) for i in range(3)]
    changes += [Change("m.onnx", ("nodes", ByName(f"/layers.{i}/Mul")), ADDED, new={"op": "Mul", "inputs": [f"y{i}"]}) for i in range(3)]
    cast, mul = group_changes(sorted_changes(changes))
    assert cast.render() == '+ m.onnx:/nodes[name=/layers.{0..2}/Cast] = {"op": "Cast"} ×3'
    assert mul.render() == '+ m.onnx:/nodes[name=/layers.{0..2}/Mul] = {"op": "Mul"} ×3'
    assert cast.to_json()["new"] == {"op": "Cast"} and "old" not in cast.to_json()


def test_constants_whose_bytes_changed_are_one_row_whatever_their_hashes():
    changes = [
        Change("m.onnx", ("initializers", ByName(f"layers.{i}/shape_64"), "stored"), CHANGED, f"inline sha256:{i:064x}", f"inline sha256:{i + 9:064x}")
        for i in range(4)
    ]
    [group] = group_changes(sorted_changes(changes))
    assert group.render() == '~ m.onnx:/initializers[name=layers.{0..3}/shape_64]/stored: "inline sha256:…" -> "inline sha256:…" ×4'


def test_severity_by_what_changed_in_a_graph():
    port = Change("m.onnx", ("inputs", ByName("x"), "dtype"), CHANGED, "float32", "float16")
    node = Change("m.onnx", ("nodes", ByName("n")), REMOVED, old={})
    attr = Change("m.onnx", ("nodes", ByName("n"), "attributes", "block_size"), CHANGED, 32, 64)
    init = Change("m.onnx", ("initializers", ByName("w"), "dtype"), CHANGED, "float32", "float16")
    assert file_verdict("m.onnx", [port, node, attr]).severity == "major"
    assert file_verdict("m.onnx", [node, attr]).severity == "moderate"
    assert file_verdict("m.onnx", [attr, init]) .reason == "attributes and initializers changed"
    assert file_verdict("m.onnx", [attr]).severity == "minor"
    assert file_verdict("mtp/mtp.onnx", [Change("mtp/mtp.onnx", (), REMOVED)]).severity == "major"
    assert file_verdict("tokenizer.json", [Change("tokenizer.json", (), ADDED)]).severity == "moderate"
    assert file_verdict("genai_config.json", [Change("genai_config.json", ("a",), CHANGED, 1, 2)]).severity == "minor"
    report = DiffReport("a", "b", (attr, port))
    assert report.severity == "major" and text(report)[:2] == ["severity: major", "  major     m.onnx: interface changed: inputs ~1"]


def test_markdown_is_cut_below_the_comment_limit_and_says_what_was_cut():
    # 5,000 changes that cannot group (every value differs): far over the limit uncut.
    changes = tuple(
        Change(f"f{i % 3}.json", ("k", f"key{i}"), CHANGED, f"old value number {i}", f"new value number {i}") for i in range(5000)
    )
    report = DiffReport("a", "b", tuple(sorted_changes(changes)))
    full = markdown(report, limit=10**9)
    assert len(full) > 5 * GITHUB_COMMENT_LIMIT
    capped = markdown(report)
    assert len(capped) <= comment_length(capped) <= GITHUB_COMMENT_LIMIT  # an emoji counts two, to be safe
    shown = capped.count("| ✏️ |")
    assert 0 < shown < 5000
    assert f"{5000 - shown} of 5000 rows not shown" in capped
    assert "`mtpc diff` without `--format markdown` prints every row; `--format json` lists every change." in capped
    assert capped.rstrip().endswith("<!-- mtpc-diff -->")  # the closing parts survive the cut
    assert capped.count("<details>") == capped.count("</details>") == 3
    small = markdown(report, limit=4000)
    assert len(small) <= 4000 and "rows not shown" in small


def test_a_weight_file_change_points_at_where_its_meaning_is():
    data = Change("model.onnx.data", (), CHANGED, "sha256:" + "a" * 64, "sha256:" + "b" * 64)
    table = Change("quantization.json", ("weights", ByName("w"), "stored", "block_size"), CHANGED, 32, 64)
    told = DiffReport("a", "b", (data, table))
    assert told.file_notes == {"model.onnx.data": "weights' stored forms: see `quantization.json`"}
    assert text(told)[3:5] == ['~ model.onnx.data:/: "sha256:aaaaaaaaaaaa…" -> "sha256:bbbbbbbbbbbb…"', "  note: weights' stored forms: see `quantization.json`"]
    alone = DiffReport("a", "b", (data,))
    assert "the weights' values differ" in alone.file_notes["model.onnx.data"]
    assert "| ✏️ | bytes differ | `\"sha256:aaaaaaaaaaaa…\"` | `\"sha256:bbbbbbbbbbbb…\"` |" in markdown(alone)
    assert alone.to_json()["changes"][0]["old"] == "sha256:" + "a" * 64  # JSON keeps the whole hash
