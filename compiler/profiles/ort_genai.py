"""What an onnxruntime-genai version accepts (`OrtGenaiProfile`), and the settings every version shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..ir import IO_DTYPES, AttentionMode, OrtGenaiTarget

# Where a target's settings live in a spec; `TargetProblem.key` is relative to it.
TARGET_PATH = ("targets", "onnxruntime_genai")

# JSON kinds a key's value may have (see `OrtGenaiProfile.keys`).
KINDS = ("string", "int", "number", "bool", "object", "array", "int_or_array")


@dataclass(frozen=True)
class TargetProblem:
    """A target setting this runtime version refuses.

    `key` is the setting's path under `targets.onnxruntime_genai` as a spec spells it;
    `at` says whether a positioned report points at that key's value or at the key.
    `cause`: the spec setting outside the target that makes this one a problem (precision.io_dtype),
    where a spec that leaves `key` to its default has its mistake (spec/rules.py reports it there).
    """

    key: tuple[str, ...]
    message: str
    hint: str | None = None
    at: str = "value"
    cause: tuple[str, ...] | None = None

    @property
    def path(self) -> str:
        return ".".join(TARGET_PATH + self.key)


@dataclass(frozen=True)
class OrtGenaiProfile:
    """What one onnxruntime-genai version accepts in `genai_config.json`, and its quirks."""

    version: str
    # Section path -> accepted key -> JSON kind. Paths are dot-joined from the root
    # ("" is the root, "model.decoder.inputs"); "[]" marks the items of an array.
    keys: Mapping[str, Mapping[str, str]]
    # Sections where any key outside `keys` is passed through as a string entry.
    open_string_sections: frozenset[str]
    # Root scalars with unknown names are ignored by the parser; unknown root objects are errors.
    root_scalars_free: bool
    execution_providers: frozenset[str]
    paged_execution_providers: frozenset[str]
    paged_io_dtypes: frozenset[str]
    # Execution providers whose kernels run every op of mtpc's graphs in bfloat16.
    bfloat16_execution_providers: frozenset[str]
    mtp_logits_dtype_by_provider: Mapping[str, str]
    shared_initializer_failing_providers: frozenset[str]
    # (attention, kv_cache) -> search.past_present_share_buffer; a pair not listed is
    # one this version cannot run (runtime-profile refuses it).
    past_present_share_buffer_by_cache: Mapping[tuple[AttentionMode, str], bool]
    prefix_caching_with_mtp: bool
    default_gpu_utilization_factor: float
    max_batch_size_limit: int
    min_block_size: int
    max_draft_tokens_range: tuple[int, int]
    # Tokens a paged hybrid's compact state updates can capture per step (decoder.state_update_capacity);
    # the paged engine drafts no more than that many tokens on a model with conv / recurrent state.
    max_state_update_capacity: int
    model_types: Mapping[str, str]
    # Why sliding-window layers keep a full-length KV cache in this version's packages, their window applied in
    # the graph (the model card and `plan` say it); empty: a window-sized cache is emitted.
    sliding_kv_cache: str = ""
    # The multimodal pipeline's model type per family whose checkpoints carry a vision tower (vision ->
    # embedding -> a decoder taking inputs_embeds); a family not listed compiles text only.
    vision_model_types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def target_problems(self, target: OrtGenaiTarget, io_dtype: str) -> list[TargetProblem]:
        """Every setting of `target` (with graphs in `io_dtype`) that this version cannot run.

        The one statement of these limits: spec lowering reports them at the spec's
        lines, the runtime-profile pass re-checks IR built without a spec.
        """
        out: list[TargetProblem] = []
        provider = target.execution_provider
        if provider not in self.execution_providers:
            out.append(
                TargetProblem(
                    ("execution_provider",),
                    f"execution provider {provider!r} is not supported for onnxruntime-genai {self.version}",
                    f"use one of: {', '.join(sorted(self.execution_providers))}",
                )
            )
        if io_dtype == "bfloat16" and provider not in self.bfloat16_execution_providers:
            out.append(
                TargetProblem(
                    ("execution_provider",),
                    f"precision.io_dtype 'bfloat16' needs execution provider "
                    f"{' or '.join(sorted(self.bfloat16_execution_providers))}, not '{provider}': "
                    f"onnxruntime has no bfloat16 kernels for these graphs on {provider}",
                    "use io_dtype float16 (or float32) on cpu",
                    cause=("precision", "io_dtype"),
                )
            )
        if target.attention is AttentionMode.PAGED:
            out += self._paged_problems(target, io_dtype)
        if isinstance(target.state_window, int) and target.attention is AttentionMode.PAGED:
            out.append(
                TargetProblem(
                    ("state_window",),
                    "a state window belongs to a dense main graph; the paged engine rolls back rejected drafts "
                    "from compact state updates instead",
                    "remove state_window, or use attention: dense",
                )
            )
        if not self.supports_kv_cache(target.attention, target.kv_cache):
            out.append(
                TargetProblem(
                    ("kv_cache",),
                    f"kv_cache '{target.kv_cache}' needs attention 'dense', not '{target.attention.value}'",
                    "the paged engine manages its KV blocks itself; remove kv_cache or use attention: dense",
                )
            )
        low, high = self.max_draft_tokens_range
        if not low <= target.max_draft_tokens <= high:
            out.append(
                TargetProblem(
                    ("max_draft_tokens",),
                    f"max_draft_tokens must be in {low}..{high} for onnxruntime-genai {self.version}, "
                    f"not {target.max_draft_tokens}",
                )
            )
        elif isinstance(target.state_window, int) and target.state_window < target.max_draft_tokens + 1:
            out.append(
                TargetProblem(
                    ("state_window",),
                    f"state_window {target.state_window} holds fewer tokens than a verify of "
                    f"max_draft_tokens {target.max_draft_tokens} + 1",
                    f"use state_window {target.max_draft_tokens + 1} (or auto); onnxruntime-genai {self.version} "
                    f"would silently draft only {target.state_window - 1} tokens",
                )
            )
        elif target.attention is AttentionMode.PAGED and target.max_draft_tokens > self.max_state_update_capacity:
            out.append(
                TargetProblem(
                    ("max_draft_tokens",),
                    f"with attention 'paged', max_draft_tokens must be at most {self.max_state_update_capacity} "
                    f"for onnxruntime-genai {self.version}, not {target.max_draft_tokens}",
                    f"the paged engine undoes rejected drafts in the linear-attention layers from compact state "
                    f"updates, which hold at most {self.max_state_update_capacity} tokens per step",
                )
            )
        return out

    def _paged_problems(self, target: OrtGenaiTarget, io_dtype: str) -> list[TargetProblem]:
        out: list[TargetProblem] = []
        if target.execution_provider not in self.paged_execution_providers:
            providers = " or ".join(f"'{p}'" for p in sorted(self.paged_execution_providers))
            out.append(
                TargetProblem(
                    ("attention",),
                    f"paged attention needs execution_provider {providers}, not '{target.execution_provider}'",
                    f"onnxruntime-genai runs paged attention on {_kernels(self.paged_execution_providers)} only; "
                    f"use attention: dense on {target.execution_provider}",
                )
            )
        # Only the paged dtypes mtpc can build graphs in are worth suggesting.
        usable = [d for d in IO_DTYPES if d in self.paged_io_dtypes]
        if io_dtype not in usable:
            wanted = " or ".join(f"'{d}'" for d in usable)
            out.append(
                TargetProblem(
                    ("attention",),
                    f"paged attention needs precision.io_dtype {wanted}, not '{io_dtype}'",
                    f"the {_kernels(self.paged_execution_providers)} paged-attention kernels take "
                    f"{' or '.join(usable)} (set precision: {{io_dtype: {usable[0]}}})",
                )
            )
        size, low = target.block_size, self.min_block_size
        if size < low or size & (size - 1):
            out.append(
                TargetProblem(
                    ("paged", "block_size"),
                    f"{'.'.join(TARGET_PATH)}.paged.block_size must be a power of two, "
                    f"at least {low} ({low}, {2 * low}, {4 * low}, ...), not {size}",
                )
            )
        if not 1 <= target.max_batch_size <= self.max_batch_size_limit:
            out.append(
                TargetProblem(
                    ("paged", "max_batch_size"),
                    f"max_batch_size must be in 1..{self.max_batch_size_limit} for onnxruntime-genai "
                    f"{self.version}, not {target.max_batch_size}",
                )
            )
        if target.num_blocks is not None and target.gpu_utilization_factor is not None:
            out.append(
                TargetProblem(
                    ("paged", "gpu_utilization_factor"),
                    "give num_blocks or gpu_utilization_factor, not both",
                    "num_blocks fixes the KV pool; gpu_utilization_factor sizes it from free GPU memory",
                    at="key",
                )
            )
        if target.num_blocks is not None and target.num_blocks < 1:
            out.append(TargetProblem(("paged", "num_blocks"), f"num_blocks must be positive, not {target.num_blocks}"))
        factor = target.gpu_utilization_factor
        if factor is not None and not 0 < factor <= 1:
            out.append(
                TargetProblem(
                    ("paged", "gpu_utilization_factor"), f"gpu_utilization_factor must be in (0, 1], not {factor:g}"
                )
            )
        return out

    def accepts(self, section: str, key: str) -> bool:
        return key in self.keys.get(section, {}) or section in self.open_string_sections

    def logits_dtype(self, execution_provider: str, io_dtype: str, emit_head: bool) -> str:
        """The dtype the graphs' `logits` output must have on this runtime."""
        if emit_head and io_dtype == "float32":
            return self.mtp_logits_dtype_by_provider.get(execution_provider, io_dtype)
        return io_dtype

    def supports_kv_cache(self, attention: AttentionMode, kv_cache: str) -> bool:
        return (attention, kv_cache) in self.past_present_share_buffer_by_cache

    def past_present_share_buffer(self, attention: AttentionMode, kv_cache: str) -> bool:
        return self.past_present_share_buffer_by_cache[(attention, kv_cache)]

    def shares_initializers(self, execution_provider: str) -> bool:
        return execution_provider not in self.shared_initializer_failing_providers

    def unaccepted(self, doc: Mapping) -> list[str]:
        """Paths in a genai_config document that this version's parser would reject."""
        return [f"{path}: {message}" for _, path, message in self.refusals(doc)]

    def refusals(self, doc: Mapping) -> list[tuple[tuple[str | int, ...], str, str]]:
        """What this version's parser would reject in a genai_config document: per problem, where
        it is (keys and list indices from the root), its section path ("[]" for any item) and why."""
        problems: list[tuple[tuple[str | int, ...], str, str]] = []
        self._walk(doc, "", (), problems)
        return problems

    def _walk(self, node, section: str, at: tuple[str | int, ...], problems: list) -> None:
        accepted = self.keys.get(section)
        if accepted is None:
            problems.append((at, section or "<root>", f"section unknown to onnxruntime-genai {self.version}"))
            return
        if not isinstance(node, Mapping):
            problems.append((at, section or "<root>", f"expected object, got {type(node).__name__}"))
            return
        for key, value in node.items():
            path = f"{section}.{key}" if section else key
            if key not in accepted:
                if section in self.open_string_sections and isinstance(value, str):
                    continue
                if not section and self.root_scalars_free and isinstance(value, (str, int, float, bool)):
                    continue
                problems.append((at + (key,), path, f"not accepted by onnxruntime-genai {self.version}"))
                continue
            kind = accepted[key]
            if not _has_kind(value, kind):
                problems.append((at + (key,), path, f"expected {kind}, got {type(value).__name__}"))
            elif kind == "object" and path in self.keys:
                self._walk(value, path, at + (key,), problems)
            elif kind == "array" and f"{path}[]" in self.keys:
                for i, item in enumerate(value):
                    self._walk(item, f"{path}[]", at + (key, i), problems)


def _has_kind(value, kind: str) -> bool:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return {
        "string": isinstance(value, str),
        "int": is_int,
        "number": (is_int or isinstance(value, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "int_or_array": is_int or (isinstance(value, list) and all(isinstance(v, int) for v in value)),
    }[kind]


def _kernels(providers: frozenset[str]) -> str:
    return "/".join(p.upper() for p in sorted(providers))


def major_minor(version: str) -> str:
    return ".".join(version.strip().split(".")[:2])


# MatMulNBits' accuracy_level when the spec sets none, per execution provider. On CPU, level 4
# (int8 activations, the kernel's fast path) decoded int4 twice as fast as level 0 in
# onnxruntime-genai with the same tokens, and a kept Q8_0 348M model 66 tok/s against 2.8
# (issue 8's measurements); the onnxruntime-genai builder uses 4 on CPU too. Other providers'
# kernels are not known to gain from it: unset.
# Levels 0/1 have no fast 8-bit CPU kernel at all: a 32000 x 1024 LM head at 8 bits took 195-216 ms
# a call against 2.8 ms (block 32) and 3.9 ms (block 16) at level 4, 1 thread; 4 bits: 2.7 ms vs 1.9 ms.
# At level 4 a decode step is bound by memory bandwidth (~13 GB/s on one core here, as llama.cpp's
# is): a block of 32 is its codes plus a scale in the activations' dtype (float32), where a GGUF
# Q4_0 / Q8_0 block holds one float16 scale, so a kept GGUF reads ~1.1-1.3x llama.cpp's bytes. A Q6_K LM head (what llama-quantize writes beside Q4_0 layers) is kept exactly as
# 8-bit blocks of 16 (41 MB with float32 scales vs Q6_K's 26.9 MB): 2.6 ms of a 7-8 ms step; an
# override re-quantizing it to int4 decoded 1.25-1.31x faster (max |error| 0.012), at the user's choice.
_MATMULNBITS_ACCURACY_LEVEL = {"cpu": 4}


def matmulnbits_accuracy_level(execution_provider: str) -> int:
    return _MATMULNBITS_ACCURACY_LEVEL.get(execution_provider, 0)


def text_view_config(og, folder):
    """`og.Config` of a package's text view: its genai_config.json, with `text_overlay.json` laid over it when
    the package is a multimodal pipeline (og.MtpGenerator drafts on the text decoder only: passes/vision.py)."""
    from pathlib import Path

    from ..ir.vision import TEXT_OVERLAY

    config = og.Config(str(folder))
    overlay = Path(folder) / TEXT_OVERLAY
    if overlay.is_file():
        config.overlay(overlay.read_text(encoding="utf-8"))
    return config
