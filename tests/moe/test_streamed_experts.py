"""Routed-expert stacks are written a few experts at a time (`graphs/moe.py`, `InitializerGroup.pieces`),
each expert read alone from the source: the package is byte-identical to writing each stack whole, for
every expert layout and stored form, at `--jobs` 1 and 2, and the memory a write holds does not grow with
the number of experts.

Sources: the shipped spec (synthetic), the release checkpoint (trunk experts one tensor per expert, the
head's fused) in f32 and bf16, and GGUFs from llama.cpp's converter with their expert stacks as written
(f32, q8_0) or re-encoded: F16, Q4_0 and Q5_0 by gguf-py, Q6_K and Q4_K (on a 256-wide variant, k-quant
rows being super-blocks of 256) by tests/fixtures/kquant_encoder.py."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from mtpc.cli.main import main
from mtpc.pipeline.driver import build
from mtpc.emit.tokenizer import synthetic_tokenizer_files
from mtpc.graphs import initializers, parameters
from mtpc.ir import MoeDims, SourceRef
from mtpc.output.write import write_package
from mtpc.sources.gguf import reader as gguf
from mtpc.sources.hf.experts import ExpertTensor
from mtpc.sources.random_weights import raw_hf_tensors
from mtpc.sources.hf.safetensors import SafetensorsFile
from tests.clients import llama_cpp
from tests.fixtures import kquant_encoder
from tests.fixtures.arch import kquant_arch
from tests.fixtures.gguf_requantize import requantize
from tests.fixtures.moe_checkpoints import (
    HEAD,
    fitted_moe_tensors,
    fuse_experts,
    moe_text_config,
    tiny_moe_arch,
    write_moe_release_checkpoint,
)
from tests.fixtures.safetensors_writer import write_safetensors
from tests.runtime.conftest import ORT_GENAI_CPU, files_of

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "specs" / "qwen35moe-tiny-mtp.yaml"
KEEP = "quantization:\n  default: {keep: source}\n"
INT4 = "quantization:\n  default: {bits: 4, block_size: 32}\n"
INT8 = "quantization:\n  default: {bits: 8, block_size: 32}\n"
FLOAT = "quantization:\n  default: {bits: null}\n"
# name -> (source file or folder under the work folder, or None for the shipped spec; the spec's rest;
# how the experts are stored)
CASES = {
    "shipped": (None, "", "float"),
    "shipped-int4": (None, INT4, "QMoE"),
    # trunk experts one tensor per expert, the head's fused gate_up_proj / down_proj
    "hf-float": ("release", "", "float"),
    "hf-int4": ("release", INT4, "QMoE"),
    "hf-int8": ("release", INT8, "QMoE"),
    "hf-bf16-float16": ("release-bf16", "precision: {io_dtype: float16}\n", "float"),
    "hf-bf16-int4": ("release-bf16", INT4, "QMoE"),
    "gguf-f32": ("moe-f32.gguf", "", "float"),
    "gguf-f16-experts": ("moe-f16-experts.gguf", "", "float"),
    "gguf-q8_0-keep": ("moe-q8_0.gguf", KEEP, "QMoE"),          # Q8_0 carried into int8 QMoE
    "gguf-q8_0-int4": ("moe-q8_0.gguf", INT4, "QMoE"),          # Q8_0 blocks dequantized, re-quantized to int4
    "gguf-q8_0-float": ("moe-q8_0.gguf", FLOAT, "float"),       # gguf-py's dequantization, float MoE
    "gguf-q4_0-keep": ("moe-q4_0-streamed.gguf", KEEP, "QMoE"),
    "gguf-q5_0-keep": ("moe-q5_0-streamed.gguf", KEEP, "QMoE"),
    "gguf-q5_0-int8": ("moe-q5_0-streamed.gguf", INT8, "QMoE"),
    # k-quant stacks (rows of 256): Q6_K carried as 8-bit blocks of 16, Q4_K (float zero points) dequantized
    "gguf-q6_k-keep": ("kq/moe-q6_k.gguf", KEEP, "QMoE"),
    "gguf-q6_k-int4": ("kq/moe-q6_k.gguf", INT4, "QMoE"),
    "gguf-q4_k-keep": ("kq/moe-q4_k.gguf", KEEP, "float"),
    "gguf-q4_k-int4": ("kq/moe-q4_k.gguf", INT4, "QMoE"),
}


def kquant_moe_arch():
    """`tiny_moe_arch` with every expert row a whole k-quant super-block (hidden and expert width 256)."""
    return replace(kquant_arch(), family="qwen35moe", intermediate_size=256,
                   moe=MoeDims(num_experts=8, top_k=2, expert_intermediate_size=256, shared_expert_intermediate_size=256))


@pytest.fixture(scope="module")
def sources(moe_workdir, moe_release, moe_ggufs, moe_arch) -> Path:
    """The work folder with every case's source: the release checkpoint (also in bf16) and GGUFs from
    llama.cpp's converter, some with their expert stacks re-encoded by gguf-py."""
    bf16 = moe_workdir / "release-bf16"
    if not bf16.exists():
        bf16.mkdir()
        for name in ("config.json", "generation_config.json"):
            shutil.copy(moe_release / name, bf16 / name)
        tensors = fuse_experts(fitted_moe_tensors(moe_arch), HEAD + "mlp.", moe_arch.moe.num_experts)
        write_safetensors(bf16 / "model.safetensors", tensors, float_dtype="BF16")
    experts = ("blk.*.ffn_*_exps.weight",)
    for qtype, name in ((QT.F16, "moe-f16-experts"), (QT.Q4_0, "moe-q4_0-streamed"), (QT.Q5_0, "moe-q5_0-streamed")):
        if not (moe_workdir / f"{name}.gguf").exists():
            requantize(moe_ggufs["f32"], moe_workdir / f"{name}.gguf", experts, qtype)
    kq = moe_workdir / "kq"
    if not kq.exists():
        arch = kquant_moe_arch()
        release = write_moe_release_checkpoint(kq / "release", arch)
        for relpath, content in synthetic_tokenizer_files(arch):
            (release / relpath).write_bytes(content)
        converted = llama_cpp.convert(release, {"f32": kq / "moe-f32.gguf"})["f32"]

        def encode(values, qtype):
            return kquant_encoder.quantize(values.reshape(-1, values.shape[-1]), qtype).reshape(*values.shape[:-1], -1)

        for qtype in (QT.Q6_K, QT.Q4_K):
            requantize(converted, kq / f"moe-{qtype.name.lower()}.gguf", experts, qtype, encode)
    return moe_workdir


def _spec(sources: Path, name: str) -> Path:
    source, rest, _ = CASES[name]
    spec = sources / f"streamed-{name}.yaml"
    if source is None:
        text = SHIPPED.read_text()
        if rest:
            text = text.replace("  default: {bits: null}\n", rest.split("\n", 1)[1])
            assert rest.split("\n", 1)[1] in text
        spec.write_text(text.replace("name: qwen35moe-tiny-mtp", f"name: {name}"))
    else:
        kind = "gguf" if source.endswith(".gguf") else "hf"
        spec.write_text(f"mtpc: 1\nname: {name}\nsource: {{{kind}: {source}}}\n{rest}{ORT_GENAI_CPU}")
    return spec


@pytest.mark.parametrize("name", sorted(CASES))
def test_expert_slabs_give_the_whole_stacks_bytes(sources, tmp_path, monkeypatch, capsys, name):
    spec = _spec(sources, name)
    slabs: list[tuple[str, int]] = []
    slab_bytes = initializers._slab_bytes
    monkeypatch.setattr(initializers, "_slab_bytes",
                        lambda t, a, filled: slabs.append((t.name, filled)) or slab_bytes(t, a, filled))

    def compile_with(stream_bytes: int, jobs: str) -> dict[str, bytes]:
        monkeypatch.setattr(parameters, "STREAM_BYTES", stream_bytes)
        out = tmp_path / f"s{stream_bytes}-j{jobs}"
        assert main(["compile", str(spec), "-o", str(out), "--jobs", jobs, "-q"]) == 0, capsys.readouterr().err
        return files_of(out)

    whole = compile_with(1 << 40, "1")
    assert not any(filled for _, filled in slabs)  # nothing streamed: every stack made whole
    report = json.loads(whole["quantization.json"])
    experts = [w for w in report["weights"] if w["role"] == "experts"]
    assert {w["stored"]["kind"] for w in experts} == {CASES[name][2]}, experts[0]
    if name.endswith("-keep") and CASES[name][2] == "QMoE":  # the source's blocks, carried as stored
        assert all(w["lossless"] for w in experts), experts[0]
    for jobs in ("1", "2"):
        streamed = compile_with(256, jobs)
        assert streamed.keys() == whole.keys()
        for rel in whole:
            assert streamed[rel] == whole[rel], (rel, jobs)
    # Every expert of every stack was a slab of its own (8 experts, FC1 and FC2, 4 layers and the head).
    later = {(t, filled) for t, filled in slabs if ".mlp.experts." in t and filled}
    assert len({t for t, _ in later}) == 2 * 5 and len(later) == 2 * 5 * 7, sorted(later)[:4]


# ----------------------------------------------------------------------------- memory


def _wide_moe_checkpoint(directory: Path, num_experts: int) -> Path:
    """A text-only Qwen3.5-MoE of two layers whose experts are wide (1024) and many: layer 0's experts
    fused as Qwen's release stores them, layer 1's one tensor per expert; float32."""
    arch = replace(tiny_moe_arch(mtp_num_layers=0), layer_kinds=tiny_moe_arch().layer_kinds[:2],
                   moe=MoeDims(num_experts=num_experts, top_k=2, expert_intermediate_size=1024,
                               shared_expert_intermediate_size=64))
    directory.mkdir()
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
              "text_config": moe_text_config(arch, with_mtp=False), "tie_word_embeddings": False}
    (directory / "config.json").write_text(json.dumps(config))
    tensors = fuse_experts(raw_hf_tensors(arch, 3, with_mtp=False), "model.language_model.layers.0.mlp.", num_experts)
    write_safetensors(directory / "model.safetensors", tensors, float_dtype="F32")
    return directory


def _peak_while_writing(spec: Path, out: Path) -> int:
    """tracemalloc's peak (numpy's buffers included) while the package is written: when the weights are read."""
    artifacts = build(spec, jobs=1).artifacts
    tracemalloc.start()
    try:
        write_package(artifacts, out)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("quantization", ["", INT4])
def test_writing_experts_holds_a_slab_not_the_stack(tmp_path, monkeypatch, quantization):
    """Going from 16 to 64 experts (float FC1 stacks of 8 and 32 MiB a layer) adds less than one slab to the
    peak memory of the write; with the stacks made whole, it adds more than a whole FC1 stack."""
    peaks: dict[tuple[str, int], int] = {}
    slab = parameters.STREAM_BYTES
    for experts in (16, 64):
        folder = _wide_moe_checkpoint(tmp_path / f"ckpt-{experts}", experts)
        spec = tmp_path / f"wide-{experts}.yaml"
        spec.write_text(f"mtpc: 1\nname: wide\nsource: {{hf: {folder.name}}}\n{quantization}{ORT_GENAI_CPU}")
        for mode, stream_bytes in (("slabs", slab), ("whole", 1 << 40)):
            monkeypatch.setattr(parameters, "STREAM_BYTES", stream_bytes)
            peaks[(mode, experts)] = _peak_while_writing(spec, tmp_path / f"pkg-{experts}-{mode}")
    fc1_expert = 2 * 1024 * 64 * 4  # one expert's gate and up rows, float32
    growth = {mode: peaks[(mode, 64)] - peaks[(mode, 16)] for mode in ("slabs", "whole")}
    # QMoE's block scales are assembled beside the streamed codes: a float32 scale per 32 weights.
    held_scales = 0 if not quantization else 2 * (64 - 16) * (2 * 1024 * 64 + 64 * 1024) // 32 * 4
    assert growth["slabs"] < slab + held_scales, (growth, peaks)
    assert growth["whole"] > 48 * fc1_expert, (growth, peaks)  # the old path: memory grows with the stack
    assert peaks[("slabs", 64)] < 4 * slab + peaks[("slabs", 16)], peaks


# ----------------------------------------------------------------------------- source pages


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="madvise(MADV_DONTNEED) is Linux's")
def test_a_fused_stack_is_read_and_released_expert_by_expert(tmp_path):
    """Reading a fused gate_up_proj (8 experts, 32 MiB) an expert at a time, each released once read, keeps
    about one expert's pages mapped; without the releases every expert's stay."""
    experts, rows, k = 8, 2 * 512, 1024
    stack = np.random.default_rng(0).standard_normal((experts, rows, k)).astype(np.float32)
    write_safetensors(tmp_path / "m.safetensors", {"gate_up_proj": stack}, float_dtype="F32")
    files = {"m.safetensors": SafetensorsFile(tmp_path / "m.safetensors")}
    gate, up = (ExpertTensor((("m.safetensors", "gate_up_proj"),), half, fused=True) for half in (0, 1))
    expert_bytes = rows * k * 4

    def grown(release: bool) -> int:
        before, most = _rss_file(), 0
        for e in range(experts):
            assert np.array_equal(gate.read_experts(files, e, e + 1), stack[e : e + 1, : rows // 2])
            assert np.array_equal(up.read_experts(files, e, e + 1), stack[e : e + 1, rows // 2 :])
            most = max(most, _rss_file() - before)
            if release:
                gate.release_experts(files, e, e + 1)
        return most

    released = grown(release=True)
    kept = grown(release=False)
    files["m.safetensors"].release("gate_up_proj")
    assert released < 2 * expert_bytes, released
    assert kept > (experts - 1) * expert_bytes, kept


def test_a_gguf_stack_releases_each_experts_bytes(moe_ggufs, monkeypatch):
    """`release_experts` gives back exactly the bytes of the experts asked for (they tile the stack)."""
    ref = SourceRef("gguf", str(moe_ggufs["q8_0"]))
    store = gguf.open_weights(ref, gguf.describe(ref))
    released: list[tuple[int, int]] = []
    monkeypatch.setattr(store._header, "release", lambda t: released.append((t.offset, t.nbytes)))
    name = "layers.0.mlp.experts.gate_proj.weight"
    for e in range(8):
        store.release_experts(name, e, e + 1)
    tensor = store._tensors[store._entry(name).gguf]
    assert released[0][0] == tensor.offset and sum(n for _, n in released) == tensor.nbytes
    assert all(a + n == b for (a, n), (b, _) in zip(released, released[1:]))
    whole = store.read(name)
    for e in range(0, 8, 3):
        part = store.read_experts(name, e, min(e + 3, 8), as_float=False)
        rows = whole.rows(e * 32, min(e + 3, 8) * 32)
        assert np.array_equal(part.data, rows.data) and np.array_equal(part.scales, rows.scales)
        assert np.array_equal(store.read_experts(name, e, e + 1, as_float=True), store.read_float(name)[e : e + 1])
