"""Large weights are written a slab at a time (`InitializerGroup.stream`): the package is byte-identical
to writing each weight whole, for every source and stored form, at any `--jobs`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx_ir as oir
import pytest

from mtpc.cli.main import main
from mtpc.graphs import initializers, parameters
from mtpc.graphs.initializers import DataFile, InitializerGroup, PlannedTensor
from tests.fixtures.arch import kquant_arch, tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import MIXED_TYPES, q4_k_m_types, write_gguf
from tests.fixtures.package_files import files_of

INT4 = "quantization:\n  default: {bits: 4, block_size: 32}\n"
# onnx-genai's sidecar needs a float embedding, which a kept Q4_K table is not.
OG_ONLY = "targets:\n  onnxruntime_genai: {execution_provider: cpu}\n"
SPECS = {
    "bf16-float": "source: {hf: ckpt}\n",
    "bf16-int4": "source: {hf: ckpt}\n" + INT4,
    "bf16-float16-io": "source: {hf: ckpt}\nprecision: {io_dtype: float16}\n",
    # Q4_0 / Q8_0 with the value-head regrouping of rows and of blocks along K.
    "gguf-mixed-keep": "source: {gguf: mixed.gguf}\nquantization:\n  default: {keep: source}\n",
    # Q4_K (float zero points), Q5_K (block offsets, by block for MatMul), Q6_K; a Q4_K embedding.
    "gguf-kquant-keep": "source: {gguf: kquant.gguf}\nquantization:\n  default: {keep: source}\n" + OG_ONLY,
    # Q6_K and Q5_K re-quantized to int4 (dequantized a chunk at a time), the error measured per chunk.
    "gguf-kquant-int4": "source: {gguf: kquant.gguf}\n" + INT4 + OG_ONLY,
    "gguf-kquant-float": "source: {gguf: kquant.gguf}\nquantization:\n  default: {bits: null}\n",
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("streamed")
    # Each with a tokenizer: specs with both targets build onnx-genai's, which refuses a package without tokenizer.json.
    write_hf_checkpoint(folder / "ckpt", tiny_arch(), seed=4, float_dtype="BF16", tokenizer=True)
    write_gguf(folder / "mixed.gguf", tiny_arch(), seed=5, types=MIXED_TYPES, tokenizer=True)
    arch = kquant_arch()
    write_gguf(folder / "kquant.gguf", arch, seed=6, types=q4_k_m_types(arch), tokenizer=True)
    return folder


@pytest.mark.parametrize("name", sorted(SPECS))
def test_streamed_weights_give_the_whole_weights_bytes(sources, tmp_path, monkeypatch, capsys, name):
    spec = sources / f"{name}.yaml"
    spec.write_text(f"mtpc: 1\nname: {name}\n{SPECS[name]}")
    slabs = []
    slab_bytes = initializers._slab_bytes
    # A slab that starts past row 0 is a weight written in parts.
    monkeypatch.setattr(initializers, "_slab_bytes", lambda t, a, filled: slabs.append(filled) or slab_bytes(t, a, filled))

    def compile_with(stream_bytes: int, jobs: str) -> tuple[dict[str, bytes], str]:
        monkeypatch.setattr(parameters, "STREAM_BYTES", stream_bytes)
        out = tmp_path / f"s{stream_bytes}-j{jobs}"
        assert main(["compile", str(spec), "-o", str(out), "-v", "--jobs", jobs]) == 0
        captured = capsys.readouterr()
        notes = [line for line in (captured.out + captured.err).splitlines() if "measured while writing" in line]
        return files_of(out), "\n".join(notes)

    whole, whole_notes = compile_with(1 << 40, "1")
    assert not any(slabs)  # nothing streamed: every weight made whole
    for jobs in ("1", "2"):
        streamed, notes = compile_with(256, jobs)
        assert streamed.keys() == whole.keys()
        for rel in whole:
            assert streamed[rel] == whole[rel], (rel, jobs)
        assert notes == whole_notes  # the re-quantization error, measured chunk by chunk, is the whole's
    assert sum(1 for filled in slabs if filled) > 50  # weights were written slab by slab
    if name == "gguf-kquant-int4":
        assert "Q6_K -> int4" in whole_notes


def _streamed_group(name: str, n: int, rows: int, *, fail_at: int | None = None) -> InitializerGroup:
    """Data [n, 4] in slabs of rows, with scales [n] and offsets [2, n] (axis 1) assembled."""
    data = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    scales = np.arange(n, dtype=np.float32) * 0.5
    offsets = np.stack([scales, -scales])
    tensors = (PlannedTensor(f"{name}.data", oir.DataType.FLOAT, (n, 4)),
               PlannedTensor(f"{name}.scales", oir.DataType.FLOAT16, (n,)),
               PlannedTensor(f"{name}.offsets", oir.DataType.FLOAT, (2, n)))

    def piece(a: int):
        if fail_at is not None and a >= fail_at:
            raise RuntimeError("source went away")
        return data[a : a + rows], scales[a : a + rows], offsets[:, a : a + rows]

    return InitializerGroup(tensors, lambda: (data, scales, offsets),
                            lambda: [lambda a=a: piece(a) for a in range(0, n, rows)], axes=(0, 0, 1))


def test_a_streamed_group_writes_what_its_whole_arrays_write():
    streamed, whole = DataFile("a.data"), DataFile("b.data")
    written = []
    for i, n in enumerate((7, 300, 1)):
        group = _streamed_group(f"w{i}", n, rows=16)
        streamed.add(replace(group, written=lambda i=i: written.append(i)))
        whole.add(InitializerGroup(group.tensors, group.produce))
    expected = b"".join(bytes(c) for c in whole.chunks(jobs=1))
    assert len(expected) == whole.size
    for jobs in (1, 2, 3):
        written.clear()
        assert b"".join(bytes(c) for c in streamed.chunks(jobs=jobs)) == expected
        assert written == [0, 1, 2]  # each group told once its bytes are out, in order


def test_a_short_or_misshapen_stream_is_an_error_not_a_short_file():
    group = _streamed_group("w", 40, rows=8)
    short = replace(group, pieces=lambda: group.pieces()[:-1])
    wide = replace(group, pieces=lambda: [lambda p=p: (np.zeros((8, 5), np.float32), *p()[1:]) for p in group.pieces()])
    for bad in (short, wide):
        data = DataFile("x.data")
        data.add(bad)
        with pytest.raises(AssertionError, match="planned shape"):
            b"".join(bytes(c) for c in data.chunks(jobs=2))


def test_a_failing_piece_stops_the_writer():
    data = DataFile("x.data")
    for i in range(4):
        data.add(_streamed_group(f"w{i}", 400, rows=4, fail_at=200 if i == 1 else None))
    with pytest.raises(RuntimeError, match="source went away"):
        for _ in data.chunks(jobs=2):
            pass
    chunks = data.chunks(jobs=2)  # a writer that stops early (an interrupt) waits for nothing more
    next(chunks)
    chunks.close()
