"""Hugging Face Qwen3-Next checkpoints (`Qwen3NextForCausalLM`, 80B-A3B): config.json and tensor names.

Qwen3.5's text-only predecessor, and what differs from it is all here:
- the config is top level (no `text_config`), RoPE is plain 1-D (`partial_rotary_factor` 0.25, no
  MRoPE rows), `layer_types` default from `full_attention_interval` (4);
- every layer is sparse unless `mlp_only_layers` / `decoder_sparse_step` say otherwise
  (transformers' `Qwen3NextDecoderLayer`); mtpc builds dense layers only as a leading run
  (`MoeDims.dense_layers`), anything else is refused at the field;
- the Gated DeltaNet projections are fused and interleaved per key-head group: `in_proj_qkvz`
  rows are, for each of the `Hk` key heads, `[q (Dk) | k (Dk) | v (r*Dv) | z (r*Dv)]` and
  `in_proj_ba` rows `[b (r) | a (r)]` (r = Hv / Hk; transformers' `fix_query_key_value_ordering`,
  llama.cpp's `Qwen3NextModel.modify_tensors`). They are read as Qwen3.5's canonical
  `in_proj_qkv` (`[q_all | k_all | v_all]`, value heads grouped), `in_proj_z`, `in_proj_b`, `in_proj_a`,
  so Qwen3.5's graphs and reference serve this family;
- the MTP head is `mtp.*` as Qwen3.5's, but the release config declares no `mtp_num_hidden_layers`
  (transformers drops `^mtp.*` on load): its depth is the checkpoint's `mtp.layers.N` tensors, as
  llama.cpp's converter counts them.
Norms are offset (`1 + w`) and `A_log` becomes `decay_scale`, as Qwen3.5's (the reader's conventions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ...util.diagnostics import SourceError
from ...ir import Architecture, LinearAttentionDims, MoeDims
from .config import Config, _rope, softmax_moe
from .config import architecture as qwen35_architecture
from .experts import Entry, ExpertTensor
from .safetensors import SafetensorsFile

ARCHITECTURES = ("Qwen3NextForCausalLM",)
FAMILY = "qwen3next"
DECLARED_KEY = "mtp_num_hidden_layers"
_FUSED = re.compile(r"^(?P<owner>.*\.linear_attn\.)(?P<fused>in_proj_qkvz|in_proj_ba)\.weight$")
_MTP_BLOCK = re.compile(r"^mtp\.layers\.(\d+)\.")
# Each fused projection's parts, in their order within one key-head group.
PARTS = {"in_proj_qkvz": ("in_proj_qkv", "in_proj_z"), "in_proj_ba": ("in_proj_b", "in_proj_a")}


def group_rows(fused: str, part: str, lin: LinearAttentionDims):
    """The rows of the fused tensor that make canonical `part`, in canonical order (a numpy index)."""
    import numpy as np

    hk, dk, r = lin.num_key_heads, lin.key_head_dim, lin.num_value_heads // lin.num_key_heads
    if fused == "in_proj_ba":
        rows = np.arange(hk * 2 * r).reshape(hk, 2, r)
        return rows[:, PARTS[fused].index(part)].reshape(-1)
    width = 2 * dk + 2 * r * lin.value_head_dim
    rows = np.arange(hk * width).reshape(hk, width)
    v0, z0 = 2 * dk, 2 * dk + r * lin.value_head_dim
    if part == "in_proj_z":
        return rows[:, z0:].reshape(-1)
    # [q of every group | k of every group | v of every group]: value heads stay grouped by key head.
    return np.concatenate([rows[:, :dk].reshape(-1), rows[:, dk:v0].reshape(-1), rows[:, v0:z0].reshape(-1)])


@dataclass(frozen=True)
class FusedPart(ExpertTensor):
    """A canonical projection taken from the rows of a fused, per-group interleaved HF tensor."""

    fused_name: str = ""
    part: str = ""
    dims: LinearAttentionDims | None = None

    def shape(self, files: dict[str, SafetensorsFile]) -> tuple[int, ...]:
        filename, name = self.parts[0]
        stored, lin = tuple(files[filename].shape(name)), self.dims
        rows = lin.num_key_heads * (2 * lin.key_head_dim + 2 * lin.value_dim // lin.num_key_heads)
        if self.fused_name == "in_proj_ba":
            rows = 2 * lin.num_value_heads
        if len(stored) != 2 or stored[0] != rows:
            raise SourceError(f"{files[filename].path}: tensor {name!r} has shape {list(stored)}; config.json implies "
                              f"{rows} rows ({self.fused_name}, interleaved per key-head group)")
        return (len(group_rows(self.fused_name, self.part, lin)), *stored[1:])

    def read(self, files: dict[str, SafetensorsFile]):
        import numpy as np

        filename, name = self.parts[0]
        return np.ascontiguousarray(files[filename].read(name)[group_rows(self.fused_name, self.part, self.dims)])


class Qwen3NextNames:
    """Qwen3.5's names and conventions (`reader._QwenNames`), with the fused projections split apart."""

    optional_head: tuple[str, ...] = ()

    def __init__(self, qwen_names, lin: LinearAttentionDims | None):
        self._qwen, self._lin = qwen_names, lin
        self.canonical_name = qwen_names.canonical_name
        self.to_canonical_value = qwen_names.to_canonical_value
        self.needs_conversion = qwen_names.needs_conversion
        self.source_name = qwen_names.source_name

    def assembled(self, entries: dict[str, Entry | ExpertTensor]) -> dict[str, Entry | ExpertTensor]:
        """`entries` with each fused `in_proj_qkvz` / `in_proj_ba` replaced by its canonical parts."""
        out = {}
        for name, entry in entries.items():
            m = _FUSED.match(name)
            if m is None or self._lin is None or isinstance(entry, ExpertTensor):
                out[name] = entry
                continue
            for part in PARTS[m["fused"]]:
                out[f"{m['owner']}{part}.weight"] = FusedPart((entry,), fused_name=m["fused"], part=part, dims=self._lin)
        return out


def names(arch: Architecture, qwen_names) -> "Qwen3NextNames":
    return Qwen3NextNames(qwen_names, arch.linear_attention)


def declared_heads(cfg: Config, hf_names) -> tuple[str, int]:
    """(where the head's depth is declared, the depth): `mtp_num_hidden_layers` when the config has it,
    else the checkpoint's `mtp.layers.N` tensors (1 when only the head's own tensors are there)."""
    field, value = cfg.lookup(DECLARED_KEY)
    if value is not None:
        return f"config.json field {field}", cfg.int(DECLARED_KEY)
    blocks = {int(m[1]) for n in hf_names if (m := _MTP_BLOCK.match(n))}
    depth = max(blocks) + 1 if blocks else int(any(n.startswith("mtp.") for n in hf_names))
    return "the checkpoint's mtp.layers.N tensors (config.json declares no mtp_num_hidden_layers)", depth


def architecture(cfg: Config, directory: Path) -> Architecture:
    """Qwen3.5's reading of the shared keys (`config.architecture`), with Qwen3-Next's own on top."""
    base = qwen35_architecture(cfg, directory)
    moe = _moe(cfg, base.num_layers)
    dense_width = moe is None or moe.dense_layers
    return replace(
        base,
        family=FAMILY,
        intermediate_size=cfg.int("intermediate_size") if dense_width else moe.expert_intermediate_size,
        rope=_rope(cfg, base.head_dim, position_rows=False),
        moe=moe,
        attention_bias=cfg.flag("attention_bias", False),
    )


def _moe(cfg: Config, num_layers: int) -> MoeDims | None:
    """transformers' rule: layer i is sparse iff i is not in `mlp_only_layers` and (i + 1) % step == 0."""
    if cfg.int("num_experts") == 0:
        return None
    step = cfg.int("decoder_sparse_step", 1)
    if step == 0:
        raise cfg.fail("decoder_sparse_step", "must be positive")
    field, only = cfg.lookup("mlp_only_layers")
    only = only or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise cfg.fail(field, "must be a list of layer indices")
    dense = [i for i in range(num_layers) if i in only or (i + 1) % step]
    if dense != list(range(len(dense))):
        where = "mlp_only_layers" if step == 1 else "decoder_sparse_step"
        raise cfg.fail(where, f"makes layers {dense} dense; mtpc builds dense layers only as a leading run "
                              f"(layers 0..k-1)")
    return None if len(dense) == num_layers else softmax_moe(cfg, "Qwen3-Next's MoE block", len(dense))
