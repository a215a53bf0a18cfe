"""Runtime profiles: what one consumer version accepts and which quirks it has.

Emitters never hard-code what a runtime takes; they ask its profile. A profile
holds two kinds of knowledge:

- the keys each `genai_config.json` section accepts (the runtime's parser rejects
  unknown keys, so emitting one is fatal), with the JSON kind of each value;
- the runtime's quirks, each as data with a comment saying why it exists.

One module per version (`ort_genai_0_18.py`); `ort_genai_profile(version)`
picks it. Each profile is tested against the real package of its version
(tests/profiles/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..diagnostics import MtpcError
from ..ir import AttentionMode

# JSON kinds a key's value may have (see `OrtGenaiProfile.keys`).
KINDS = ("string", "int", "number", "bool", "object", "array", "int_or_array")


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
    model_types: Mapping[str, str]

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
        problems: list[str] = []
        self._walk(doc, "", problems)
        return problems

    def _walk(self, node: Mapping, section: str, problems: list[str]) -> None:
        accepted = self.keys.get(section)
        if accepted is None:
            problems.append(f"{section or '<root>'}: section unknown to onnxruntime-genai {self.version}")
            return
        for key, value in node.items():
            path = f"{section}.{key}" if section else key
            if key not in accepted:
                if section in self.open_string_sections and isinstance(value, str):
                    continue
                if not section and self.root_scalars_free and isinstance(value, (str, int, float, bool)):
                    continue
                problems.append(f"{path}: not accepted by onnxruntime-genai {self.version}")
                continue
            kind = accepted[key]
            if not _has_kind(value, kind):
                problems.append(f"{path}: expected {kind}, got {type(value).__name__}")
            elif kind == "object" and path in self.keys:
                self._walk(value, path, problems)
            elif kind == "array" and f"{path}[]" in self.keys:
                for item in value:
                    self._walk(item, f"{path}[]", problems)


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


def _major_minor(version: str) -> str:
    return ".".join(version.strip().split(".")[:2])


def ort_genai_profile(version: str) -> OrtGenaiProfile:
    """The profile for an onnxruntime-genai version ("0.18" or "0.18.0")."""
    from . import ort_genai_0_18

    known = {_major_minor(ort_genai_0_18.PROFILE.version): ort_genai_0_18.PROFILE}
    profile = known.get(_major_minor(version))
    if profile is None:
        raise MtpcError.single(
            f"no runtime profile for onnxruntime_genai version {version!r}",
            hint=f"supported versions: {', '.join(sorted(p.version for p in known.values()))}",
            path="targets.onnxruntime_genai.version",
        )
    return profile
