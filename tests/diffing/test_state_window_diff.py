"""A windowed package and the unwindowed one of the same spec differ only where `mtpc diff` says they do.

Both are compiled and written; every file whose bytes differ (or that only one has) must be one
`mtpc diff` reports a change in, and the reverse; the weights (model.onnx.data, the heads' data) are
byte-identical, since the window changes the graph's state I/O and ops, never a weight.
"""

from __future__ import annotations

from pathlib import Path

import mtpc
from mtpc.output.write import write_package
from mtpc.pipeline.driver import build

from tests.fixtures.package_files import files_of

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "specs" / "qwen35-tiny-mtp.yaml"


def test_windowed_and_unwindowed_differ_only_where_diff_says(tmp_path):
    text = DEFAULT.read_text()
    assert "    max_draft_tokens: 4\n" in text and "state_window" not in text  # the default: auto
    unwindowed = tmp_path / "off.yaml"
    unwindowed.write_text(text.replace("    max_draft_tokens: 4\n", "    max_draft_tokens: 4\n    state_window: off\n"))
    windowed = tmp_path / "auto.yaml"
    windowed.write_text(text)
    packages = {}
    for spec in (unwindowed, windowed):
        packages[spec.stem] = tmp_path / f"pkg-{spec.stem}"
        write_package(build(spec).artifacts, packages[spec.stem])
    old, new = files_of(packages["off"]), files_of(packages["auto"])
    differing = {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}
    result = mtpc.diff(packages["off"], packages["auto"])
    reported = {change.file for change in result.changes}
    assert differing == reported, (sorted(differing), sorted(reported))
    assert differing == {"README.md", "manifest.json", "model.onnx", "decoder.onnx", "provenance.json"}
    assert old["model.onnx.data"] == new["model.onnx.data"] and old["model.onnx"] == new["decoder.onnx"]
