"""`mtpc compile --jobs N`: weights converted in N threads, the package byte-identical for any N."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import onnx_ir as oir
import pytest

from mtpc.cli.main import main
from mtpc.graphs.initializers import DataFile, InitializerGroup, PlannedTensor
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import MIXED_TYPES, write_gguf
from tests.fixtures.package_files import files_of

SPECS = {
    "bf16-float": "source: {hf: ckpt}\n",
    "bf16-int4": "source: {hf: ckpt}\nquantization:\n  default: {bits: 4, block_size: 32}\n",
    "bf16-float16-io": "source: {hf: ckpt}\nprecision: {io_dtype: float16}\n",
    "gguf-keep": "source: {gguf: m.gguf}\nquantization:\n  default: {keep: source}\n",
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("jobs")
    # Each with a tokenizer: both targets are built, and onnx-genai refuses a package without tokenizer.json.
    write_hf_checkpoint(folder / "ckpt", tiny_arch(), seed=4, float_dtype="BF16", tokenizer=True)
    write_gguf(folder / "m.gguf", tiny_arch(), seed=5, types=MIXED_TYPES, tokenizer=True)
    return folder


@pytest.mark.parametrize("name", sorted(SPECS))
def test_jobs_1_and_2_give_byte_identical_packages(sources, tmp_path, name):
    spec = sources / f"{name}.yaml"
    spec.write_text(f"mtpc: 1\nname: {name}\n{SPECS[name]}")
    packages = {}
    for jobs in ("1", "2", "3"):
        out = tmp_path / f"j{jobs}"
        assert main(["compile", str(spec), "-o", str(out), "-q", "--jobs", jobs]) == 0
        packages[jobs] = files_of(out)
    assert packages["1"].keys() == packages["2"].keys() == packages["3"].keys()
    assert any(rel.endswith(".onnx.data") and len(data) > 10_000 for rel, data in packages["1"].items())
    for rel in packages["1"]:
        assert packages["2"][rel] == packages["1"][rel], rel
        assert packages["3"][rel] == packages["1"][rel], rel


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_jobs_must_be_a_positive_whole_number(bad, capsys, tmp_path):
    assert main(["compile", str(tmp_path / "s.yaml"), "--jobs", bad]) == 2
    assert "--jobs" in capsys.readouterr().err


def test_data_file_produces_ahead_in_threads_and_writes_in_order():
    seen: list[tuple[int, str]] = []

    def group(i: int) -> InitializerGroup:
        def produce():
            time.sleep(0.02 * (i % 3))  # finish out of order
            seen.append((i, threading.current_thread().name))
            return (np.full((4,), i, np.float32),)

        return InitializerGroup((PlannedTensor(f"t{i}", oir.DataType.FLOAT, (4,)),), produce)

    data = DataFile("x.data")
    for i in range(8):
        data.add(group(i))
    one = b"".join(bytes(c) for c in data.chunks(jobs=1))
    assert all(name == threading.current_thread().name for _, name in seen)
    seen.clear()
    two = b"".join(bytes(c) for c in data.chunks(jobs=2))
    assert two == one
    assert sorted(i for i, _ in seen) == list(range(8))
    assert all(name.startswith("mtpc-data") for _, name in seen)
