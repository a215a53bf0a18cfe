"""Routed-expert tensors of HF Qwen3.5-MoE checkpoints, stacked into the canonical `[E, ...]` form.

Releases store the experts in two layouts, and the canonical form (`mtpc.weights`) is one:

- one tensor per expert, as transformers' `save_pretrained` writes them:
  `<layer>.mlp.experts.<e>.{gate,up,down}_proj.weight` (nn.Linear layout each);
- fused, as transformers holds them in memory and Qwen's own release stores the MTP block's
  experts: `<layer>.mlp.experts.gate_up_proj` `[E, 2I, H]` (gate rows first, then up: the
  modeling code `chunk(2)`s them) and `<layer>.mlp.experts.down_proj` `[E, H, I]`.

Either becomes `<layer>.mlp.experts.{gate,up,down}_proj.weight` (`[E, I, H]`, `[E, H, I]`),
read lazily: the header alone gives every shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...util.diagnostics import SourceError
from ...util.lazy_import import lazy_module
from .safetensors import SafetensorsFile

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # read when a weight is: a description of the checkpoint needs none

_PER_EXPERT = re.compile(r"^(?P<owner>.*\.mlp\.experts\.)(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")
_FUSED = re.compile(r"^(?P<owner>.*\.mlp\.experts\.)(?P<proj>gate_up_proj|down_proj)(?:\.weight)?$")

Entry = tuple[str, str]  # (file name, HF tensor name)


@dataclass(frozen=True)
class ExpertTensor:
    """One canonical expert tensor: stacked from per-expert tensors, or all or half of a fused one."""

    parts: tuple[Entry, ...]
    # For a fused gate_up_proj: 0 = the gate rows, 1 = the up rows. None: the parts whole.
    half: int | None = None
    fused: bool = False

    def shape(self, files: dict[str, SafetensorsFile]) -> tuple[int, ...]:
        filename, name = self.parts[0]
        shape = tuple(files[filename].shape(name))
        if not self.fused:
            first = list(shape)
            headers = {f: files[f].entries for f in {f for f, _ in self.parts}}  # 256 experts: no call per part
            for other_file, other in self.parts[1:]:
                if headers[other_file][other]["shape"] != first:
                    raise SourceError(
                        f"{files[other_file].path}: expert tensor {other!r} has shape "
                        f"{list(files[other_file].shape(other))}, {name!r} has {list(shape)}"
                    )
            return (len(self.parts), *shape)
        if self.half is None:
            return shape
        return (shape[0], shape[1] // 2, *shape[2:])

    def read(self, files: dict[str, SafetensorsFile]) -> np.ndarray:
        if not self.fused:
            return np.stack([files[f].read(n) for f, n in self.parts])
        filename, name = self.parts[0]
        value = files[filename].read(name)
        if self.half is None:
            return value
        rows = value.shape[1] // 2
        return value[:, self.half * rows : (self.half + 1) * rows]


    def read_experts(self, files: dict[str, SafetensorsFile], start: int, stop: int) -> np.ndarray:
        """Experts `start:stop` of `read`'s stack in float32, an array of their own: only their bytes are
        read (bfloat16 widened for them alone), never the whole stack."""
        if not self.fused:
            return np.stack([np.asarray(files[f].read(n), np.float32) for f, n in self.parts[start:stop]])
        filename, name = self.parts[0]
        st = files[filename]
        bits = st.read_bfloat16_bits(name)
        stored = bits if bits is not None else st.read(name)
        chosen = stored[start:stop]
        if self.half is not None:
            rows = stored.shape[1] // 2
            chosen = chosen[:, self.half * rows : (self.half + 1) * rows]
        if bits is not None:
            from ...util.arrays import widen_bfloat16

            return widen_bfloat16(np.ascontiguousarray(chosen))
        return np.array(chosen, dtype=np.float32)  # a copy: the source's pages may go once it is made

    def release_experts(self, files: dict[str, SafetensorsFile], start: int, stop: int) -> None:
        """Drop the pages of experts `start:stop` from the process (they stay in the page cache)."""
        if not self.fused:
            for filename, name in self.parts[start:stop]:
                files[filename].release(name)
            return
        filename, name = self.parts[0]
        files[filename].release(name, (start, stop))


def parts_of(value: Entry | ExpertTensor) -> tuple[Entry, ...]:
    return value.parts if isinstance(value, ExpertTensor) else (value,)


def group_experts(entries: dict[str, Entry], where: str, shown=lambda name: name) -> dict[str, Entry | ExpertTensor]:
    """`entries` (canonical-but-per-expert name -> entry) with the experts stacked under canonical names;
    `shown` gives a missing expert's name as the checkpoint spells it."""
    out: dict[str, Entry | ExpertTensor] = {}
    per_expert: dict[str, dict[int, Entry]] = {}
    for name, entry in entries.items():
        if ".experts." not in name:  # most names of a dense model; an expert's are matched below
            out[name] = entry
            continue
        m = _PER_EXPERT.match(name)
        if m:
            canonical = f"{m['owner']}{m['proj']}.weight"
            per_expert.setdefault(canonical, {})[int(m["expert"])] = entry
            continue
        m = _FUSED.match(name)
        if m and m["proj"] == "gate_up_proj":
            for half, proj in enumerate(("gate_proj", "up_proj")):
                out[f"{m['owner']}{proj}.weight"] = ExpertTensor((entry,), half, fused=True)
        elif m:
            out[f"{m['owner']}down_proj.weight"] = ExpertTensor((entry,), fused=True)
        else:
            out[name] = entry
    for canonical, by_index in sorted(per_expert.items()):
        if canonical in out:
            raise SourceError(f"{where}: {canonical} is stored both fused and one tensor per expert")
        missing = sorted(set(range(max(by_index) + 1)) - set(by_index))
        if missing:
            owner = canonical.rsplit(".", 2)[0]
            proj = canonical.rsplit(".", 2)[1]
            raise SourceError(
                f"{where}: expert tensors are missing: "
                f"{', '.join(shown(f'{owner}.{e}.{proj}.weight') for e in missing[:6])}"
            )
        out[canonical] = ExpertTensor(tuple(by_index[e] for e in range(len(by_index))))
    return out
