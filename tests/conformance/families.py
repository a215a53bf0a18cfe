"""The families the conformance suite runs, each as one `Family`: what its fixture provides, nothing more.

A new family's fixture module (tests/fixtures/) describes it (`conformance_family()`) and FAMILIES names it
once; every oracle in tests/conformance/ then runs on it. A family says where an oracle does not apply, with the reason
(`unsupported`), instead of a test skipping.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mtpc.ir import Architecture
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
    # Bytes of its tensors (BF16 unless `dtypes` says otherwise), (at least, at most).
    size: tuple[float, float]
    # Tensors the release stores beyond the canonical ones (name -> shape).
    extra: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # The safetensors dtype of each tensor (name -> code), where not BF16 (DeepSeek-V3's FP8 blocks and scales).
    dtypes: Callable[[str], str | None] = lambda name: None


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
    # Per HF tensor name suffix, (split, join): the parts the converter writes it as, in their stored layouts, and
    # back (deepseek2's kv_b_proj: a transposed k half and a v half, blocked along different axes).
    converter_splits: dict[str, tuple[Callable, Callable]] = field(default_factory=dict)
    # The GGUF tensor holding the head's fc, for the llama.cpp control with its input halves swapped.
    eh_proj: str = ""
    real_size: Callable[[], RealSize] | None = None
    # GGUF metadata keys written into the converter's files before llama.cpp's runtime runs them, where the
    # runtime would otherwise guess (deepseek2's expert_gating_func); mtpc compiles the converter's files as written.
    llama_cpp_runtime_keys: dict[str, int] = field(default_factory=dict)
    # The bytes a sequence of the fixture's token ids spells (llama.cpp's runtime is given prompts as text and prints
    # text); default: the tiny byte-level tokenizer the synthetic fixtures share.
    token_bytes: Callable[[Sequence[int]], bytes] = lambda tokens: _synthetic_token_bytes(tokens)
    # The draft counts og's MTP decoding is held to greedy and to the numpy rendition at (each costs a rendition
    # of the whole run in float64; a larger fixture checks fewer).
    draft_counts: tuple[int, ...] = (1, 2, 3, 4)
    # Oracles that do not apply, with the reason.
    unsupported: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def references(self) -> tuple[DecoderReference, MtpHeadReference]:
        store = self.store()
        return DecoderReference(self.arch, store), MtpHeadReference(self.arch, store)

    def supports(self, oracle: str) -> bool:
        return oracle not in self.unsupported


def _synthetic_token_bytes(tokens: Sequence[int]) -> bytes:
    from tests.fixtures.glm4moe_checkpoints import piece_bytes

    return piece_bytes(list(tokens))


def _fixture(module: str, *args) -> Callable[[], Family]:
    """The family its fixture module describes (`conformance_family(*args)`), imported on first use."""
    return lambda: importlib.import_module(f"tests.fixtures.{module}").conformance_family(*args)


FAMILIES: dict[str, Callable[[], Family]] = {
    "qwen35": _fixture("fitted_head"),
    "qwen35-stdlib": _fixture("stdlib_checkpoint"),
    "qwen35moe": _fixture("moe_checkpoints"),
    "qwen3next-r2": _fixture("qwen3next_checkpoints", 2),
    "qwen3next-r1": _fixture("qwen3next_checkpoints", 1),
    "glm4moe": _fixture("glm4moe_checkpoints"),
    "deepseek2": _fixture("deepseek2_checkpoints"),
    "deepseek3": _fixture("deepseek3_checkpoints"),
    "step35": _fixture("step35_checkpoints"),
    "nemotron_h": _fixture("nemotron_h_checkpoints"),
    "nemotron_h-latent": _fixture("nemotron_h_checkpoints", True),
    "mimo2": _fixture("mimo2_checkpoints"),
}


@functools.lru_cache(maxsize=None)
def family(name: str) -> Family:
    return FAMILIES[name]()


@functools.lru_cache(maxsize=None)
def simulated(name: str, prompt: tuple[int, ...], steps: int, max_draft: int):
    """The numpy rendition of greedy speculative decoding with the family's head (`fitted_head.simulate_speculative`),
    once per family, prompt and draft count: the release's package and the converter's f32 file hold the same
    weights, so both suites hold og to the same counts (a trained checkpoint's float64 rendition costs seconds)."""
    from tests.fixtures.fitted_head import simulate_speculative

    return simulate_speculative(*family(name).references, list(prompt), steps, max_draft)
