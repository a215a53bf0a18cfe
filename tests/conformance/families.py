"""The families the conformance suite runs, each as one `Family`: what its fixture provides, nothing more.

A new family adds one entry to FAMILIES (and its fixture module in tests/fixtures/); every oracle in
tests/conformance/ then runs on it. A family says where an oracle does not apply, with the reason
(`unsupported`), instead of a test skipping.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from mtpc.ir import Architecture, LayerKind
from mtpc.reference.forward import DecoderReference, MtpHeadReference
from mtpc.weights import WeightStore


@dataclass(frozen=True)
class RealSize:
    """A released model's shape, for the metadata verbs on a header-only checkpoint (no weight is read)."""

    config: dict
    arch: Architecture
    # (canonical name, shape) -> the release's tensors (name, shape) holding it.
    names: Callable[[str, tuple[int, ...]], list[tuple[str, tuple[int, ...]]]]
    # Lines `inspect` prints and `plan` prints for it (its expert stacks, its head).
    inspect_lines: tuple[str, ...]
    plan_lines: tuple[str, ...]
    # Bytes of its BF16 tensors, (at least, at most).
    size: tuple[float, float]
    # Tensors the release stores beyond the canonical ones (name -> shape).
    extra: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    name: str
    arch: Architecture
    # Prompts whose 20-token greedy continuations (and the fitted head's drafts) reach no special token.
    prompts: tuple[tuple[int, ...], ...]
    # The release's tensors (HF names and layout, the fitted head included).
    tensors: Callable[[], dict[str, np.ndarray]]
    # (folder, tensors or None for `tensors()`, with_mtp) -> the release folder: config, generation config, tokenizer.
    write: Callable[..., Path]
    # (folder, tensors) -> transformers' own model of the trunk those tensors hold.
    transformers: Callable[[Path, dict[str, np.ndarray]], object]
    # The canonical weights, derived by the fixture apart from mtpc's readers.
    store: Callable[[], WeightStore]
    # llama.cpp's converter's pre-tokenizer name for the fixture's tokenizer.
    pre_tokenizer: str = "qwen35"
    # Per HF tensor, the permutation of axis 1 the converter applies before quantizing (its blocks run
    # along that axis, so the Q8_0 rounding depends on it); rows may move freely.
    column_orders: Callable[[], dict[str, np.ndarray]] = dict
    # The GGUF tensor holding the head's fc, for the llama.cpp control with its input halves swapped.
    eh_proj: str = ""
    real_size: Callable[[], RealSize] | None = None
    # Oracles that do not apply, with the reason.
    unsupported: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def references(self) -> tuple[DecoderReference, MtpHeadReference]:
        store = self.store()
        return DecoderReference(self.arch, store), MtpHeadReference(self.arch, store)

    def supports(self, oracle: str) -> bool:
        return oracle not in self.unsupported


def _qwen3next(ratio: int) -> Family:
    from tests.fixtures import qwen3next_checkpoints as q

    arch = q.tiny_qwen3next_arch(ratio=ratio)
    return Family(
        name=f"qwen3next-r{ratio}", arch=arch, prompts=q.PROMPTS,
        tensors=lambda: q.qwen3next_release_tensors(arch),
        write=lambda folder, tensors=None, with_mtp=True: q.write_qwen3next_checkpoint(folder, arch, tensors=tensors,
                                                                                      with_mtp=with_mtp),
        transformers=lambda folder, tensors: q.load_transformers(
            q.write_qwen3next_checkpoint(folder, arch, tensors=tensors, with_mtp=False)),
        store=lambda: q.fitted_qwen3next_store(arch), eh_proj=f"blk.{arch.num_layers}.nextn.eh_proj.weight",
        real_size=lambda: RealSize(
            q.A3B_CONFIG, q.a3b_arch(), lambda c, shape: q.release_names(c, shape, q.a3b_arch()),
            inspect_lines=("architecture:       qwen3next",
                           "experts:            512 experts, top-10 (softmax, renormalized), expert FFN 512, shared "
                           "expert 512 (sigmoid gate)",
                           "linear attn:        16 key heads x 128, 32 value heads x 128, conv kernel 4",
                           "mtp head:           yes, 1 layer(s)"),
            # 48 trunk layers and the head, three expert stacks each, planned as QMoE blocks from headers alone.
            plan_lines=("model: qwen3next (hf source), 48 layers (12 full attention, 36 linear attention)",
                        "147 experts float32 -> int4 QMoE block 32 accuracy 4 (lossy)"),
            size=(150e9, 165e9)),  # 80B BF16 parameters and the head's, near enough
    )


def _glm4moe() -> Family:
    from tests.fixtures import glm4moe_checkpoints as g

    arch = g.tiny_glm_arch()
    return Family(
        name="glm4moe", arch=arch, prompts=g.PROMPTS, tensors=lambda: g.fitted_glm_tensors(arch),
        write=lambda folder, tensors=None, with_mtp=True: g.write_glm_checkpoint(
            folder, arch, tensors=tensors, with_mtp=with_mtp, tokenizer=True),
        transformers=lambda folder, tensors: g.load_transformers_glm(arch, tensors),
        store=lambda: g.fitted_glm_store(arch), pre_tokenizer="glm4",
        eh_proj=f"blk.{arch.num_layers}.nextn.eh_proj.weight",
        real_size=lambda: RealSize(
            g.AIR_CONFIG, g.AIR, lambda c, shape: g.release_names(c, shape, g.AIR.num_layers),
            inspect_lines=(
                "architecture:       glm4moe",
                "experts:            128 experts, top-8 (sigmoid, selection bias, renormalized), expert FFN 1408, "
                "shared expert 1408; the first 1 layer(s) dense",
                "attention:          96 heads, 8 kv heads, head dim 128 (grouped-query attention, q/k/v bias, no "
                "qk-norm, rotary on 64 of 128 channels)",
                "mtp head:           yes, 1 layer(s), a trailing decoder layer (block 46, after the trunk)"),
            # 45 sparse trunk layers and the MTP layer, three expert stacks each, planned as QMoE blocks.
            plan_lines=("model: glm4moe (hf source), 46 layers (46 full attention)",
                        "138 experts float32 -> int4 QMoE block 32 accuracy 4 (lossy)",
                        "  mtp head: 1 block, a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)"),
            size=(200e9, 230e9),  # 106B BF16 parameters and the head's copies, near enough
            # the release's copies of the embedding and LM head beside its MTP layer
            extra={"model.layers.46.embed_tokens.weight": (151552, 4096),
                   "model.layers.46.shared_head.head.weight": (151552, 4096)}),
    )


_QWEN35_RUNTIME = ("its fixture's tokenizer has no BPE merge (llama.cpp's loader needs one) and its prompts are not "
                   "printable bytes, so llama.cpp's runtime cannot be given the fixture's token ids")


def _tiled_out_proj(arch: Architecture) -> dict[str, np.ndarray]:
    """Qwen3.5's converter tiles the value heads (`_LinearAttentionVReorderBase`): on `out_proj`'s columns too."""
    lin = arch.linear_attention
    nk, r, dv = lin.num_key_heads, lin.num_value_heads // lin.num_key_heads, lin.value_head_dim
    order = np.arange(nk * r * dv).reshape(nk, r, dv).transpose(1, 0, 2).reshape(-1)
    return {f"model.language_model.layers.{i}.linear_attn.out_proj.weight": order
            for i in arch.layers_of(LayerKind.LINEAR_ATTENTION)}


def _write_qwen35(folder: Path, arch: Architecture, tensors: dict, with_mtp: bool, fuse_head: bool) -> Path:
    from mtpc.emit.tokenizer import synthetic_tokenizer_files
    from tests.fixtures.checkpoints import write_hf_checkpoint
    from tests.fixtures.moe_checkpoints import HEAD, fuse_experts, write_moe_release_checkpoint
    from tests.fixtures.safetensors_writer import write_safetensors

    folder = write_moe_release_checkpoint(folder, arch) if fuse_head else write_hf_checkpoint(folder, arch)
    if not with_mtp:
        tensors = {n: v for n, v in tensors.items() if not n.startswith("mtp.")}
    elif fuse_head:
        tensors = fuse_experts(tensors, HEAD + "mlp.", arch.moe.num_experts)
    write_safetensors(folder / "model.safetensors", tensors, float_dtype="F32")
    for relpath, content in synthetic_tokenizer_files(arch):
        (folder / relpath).write_bytes(content)
    return folder


def _qwen35() -> Family:
    from tests.clients import hf_transformers
    from tests.fixtures import fitted_head as f
    from tests.fixtures.arch import tiny_arch

    arch = tiny_arch()
    write = lambda folder, tensors=None, with_mtp=True: _write_qwen35(  # noqa: E731
        folder, arch, f.fitted_raw_hf_tensors(arch) if tensors is None else tensors, with_mtp, False)
    return Family(
        name="qwen35", arch=arch, prompts=f.PROMPTS, tensors=lambda: f.fitted_raw_hf_tensors(arch), write=write,
        transformers=lambda folder, tensors: hf_transformers.load(write(folder, tensors, with_mtp=False)),
        store=lambda: f.fitted_store(arch), column_orders=lambda: _tiled_out_proj(arch),
        eh_proj=f"blk.{arch.num_layers}.nextn.eh_proj.weight", unsupported={"llama.cpp runtime": _QWEN35_RUNTIME},
    )


def _qwen35moe() -> Family:
    from tests.fixtures import moe_checkpoints as m
    from tests.fixtures.fitted_head import PROMPTS

    arch = m.tiny_moe_arch()
    return Family(
        name="qwen35moe", arch=arch, prompts=PROMPTS, tensors=lambda: m.fitted_moe_tensors(arch),
        write=lambda folder, tensors=None, with_mtp=True: _write_qwen35(
            folder, arch, m.fitted_moe_tensors(arch) if tensors is None else tensors, with_mtp, True),
        transformers=lambda folder, tensors: m.load_transformers_model(arch, tensors),
        store=lambda: m.fitted_moe_store(arch), column_orders=lambda: _tiled_out_proj(arch),
        eh_proj=f"blk.{arch.num_layers}.nextn.eh_proj.weight", unsupported={"llama.cpp runtime": _QWEN35_RUNTIME},
        real_size=lambda: RealSize(
            m.a3b_config(), m.A3B, lambda c, shape: m.hf_expert_names(c, shape, fused=c.startswith("mtp.")),
            inspect_lines=("256 experts, top-8 (softmax, renormalized), expert FFN 512, shared expert 512 (sigmoid gate)",
                           "mtp head:           yes, 1 layer(s)"),
            # 40 trunk layers and the head, three expert stacks each, planned as QMoE blocks from headers alone.
            plan_lines=("123 experts float32 -> int4 QMoE block 32 accuracy 4 (lossy)",),
            size=(60e9, 75e9)),  # 35B BF16 parameters, near enough
    )


FAMILIES: dict[str, Callable[[], Family]] = {
    "qwen35": _qwen35,
    "qwen35moe": _qwen35moe,
    "qwen3next-r2": lambda: _qwen3next(2),
    "qwen3next-r1": lambda: _qwen3next(1),
    "glm4moe": _glm4moe,
}


@functools.lru_cache(maxsize=None)
def family(name: str) -> Family:
    return FAMILIES[name]()
