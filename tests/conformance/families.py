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

from mtpc.ir import Architecture
from mtpc.reference.forward import DecoderReference, MtpHeadReference
from mtpc.weights import WeightStore


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
    )


FAMILIES: dict[str, Callable[[], Family]] = {
    "qwen3next-r2": lambda: _qwen3next(2),
    "qwen3next-r1": lambda: _qwen3next(1),
    "glm4moe": _glm4moe,
}


@functools.lru_cache(maxsize=None)
def family(name: str) -> Family:
    return FAMILIES[name]()
