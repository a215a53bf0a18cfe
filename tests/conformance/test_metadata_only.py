"""The metadata verbs on a released model's shape read its headers, never a weight: `inspect`, `check SPEC`,
`plan` and `diff` of two specs.

Each family's `RealSize` (its release's config.json and tensor layout) is written as one safetensors shard per
layer, a header for every tensor the release holds (BF16, or the release's own dtype: `RealSize.dtypes`) and no data: each shard is extended to its full size
as a sparse file. Reading any tensor's bytes fails the test.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.ir import SourceRef
from mtpc.sources.hf import reader as hf
from mtpc.sources.hf.safetensors import SafetensorsFile
from mtpc.weights import canonical_shapes
from tests.fixtures.safetensors_writer import write_sparse_safetensors
from tests.runtime.conftest import write_spec

from .families import FAMILIES, family

NAMES = sorted(n for n in FAMILIES if family(n).real_size is not None)
INT4 = "quantization:\n  default: {bits: 4, block_size: 32}\n"
_written: dict[str, Path] = {}


@pytest.fixture
def release(tmp_path_factory, request) -> Path:
    name = request.node.callspec.params["name"]
    if name not in _written:
        real = family(name).real_size()
        folder = tmp_path_factory.mktemp(f"real-{name}") / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(real.config))
        shards: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
        tensors = [t for c, shape in canonical_shapes(real.arch).items() for t in real.names(c, shape)]
        for tensor, shape in [*tensors, *real.extra.items()]:
            parts = tensor.split(".")
            layer = parts[2] if tensor.startswith("model.layers.") else parts[0]
            shards[layer][tensor] = shape
        weight_map, total = {}, 0
        for i, (layer, shapes) in enumerate(sorted(shards.items())):
            filename = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            dtypes = {n: code for n in shapes if (code := real.dtypes(n)) is not None}
            total += write_sparse_safetensors(folder / filename, shapes, dtypes=dtypes)
            weight_map.update({n: filename for n in shapes})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        assert real.size[0] < total < real.size[1], total
        _written[name] = folder
    return _written[name]


@pytest.fixture(autouse=True)
def no_weight_bytes(monkeypatch):
    def refuse(self):
        raise AssertionError(f"{self.path}: a weight's bytes were read")

    monkeypatch.setattr(SafetensorsFile, "_mapped", refuse)


@pytest.mark.parametrize("name", NAMES)
def test_inspect_reads_no_weight(release, capsys, name):
    real = family(name).real_size()
    assert hf.describe(SourceRef("hf", str(release))).architecture == real.arch
    assert main(["inspect", str(release)]) == 0
    out = capsys.readouterr().out
    for line in real.inspect_lines:
        assert line in out, out


@pytest.mark.parametrize("verb", ["plan", "check"])
@pytest.mark.parametrize("name", NAMES)
def test_plan_and_check_read_no_weight(release, tmp_path, capsys, name, verb):
    spec = write_spec(tmp_path / f"{name}.yaml", name, f"{{hf: {release}}}", INT4)
    code = main([verb, str(spec)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    if verb == "plan":
        for line in family(name).real_size().plan_lines:
            assert line in out, out


@pytest.mark.parametrize("name", NAMES)
def test_diff_of_two_specs_reads_no_weight(release, tmp_path, capsys, name):
    a = write_spec(tmp_path / "a.yaml", name, f"{{hf: {release}}}", INT4)
    b = write_spec(tmp_path / "b.yaml", name, f"{{hf: {release}}}", INT4.replace("bits: 4", "bits: 8"))
    assert main(["diff", str(a), str(a)]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "int8" in out or "bits" in out, out
