"""The model a Q8_0 GGUF of llama.cpp's converter holds, as transformers takes it: the release's tensors with
each weight the converter quantizes replaced by its Q8_0 rounding, computed here with gguf-py.

Q8_0 rounds blocks of 32 along a row, independently per row: a converter that only moves, splits or stacks
rows (Qwen3-Next's `in_proj_qkvz` split, experts stacked) rounds each row as the release holds it, so the
rounding is done in the release's layout; a converter that permutes columns (Qwen3.5's tiled value heads on
`out_proj`) is given the permutation (`Family.column_orders`). The converter keeps float what it routes with
or convolves with (routers, the shared expert's gate, the conv kernel) and every 1-D tensor, and writes F16
what Q8_0 cannot hold (rows not a multiple of 32 long). A converter that splits a tensor into parts of other
layouts (deepseek2's kv_b_proj into a transposed k half and a v half) is given the split and its inverse
(`Family.converter_splits`), and each part is rounded as the file stores it. The head's tensors are left as
they are: transformers has no MTP head. As a check that the rule matches the file, the weights rounded to Q8_0
and to F16 must hold as many values as the file's trunk Q8_0 and F16 tensors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize

from mtpc.ir import Architecture

Q8_0 = GGMLQuantizationType.Q8_0
F16 = GGMLQuantizationType.F16
KEPT_FLOAT = ("mlp.gate.weight", "shared_expert_gate.weight", "conv1d.weight", "moe.gate.weight")  # Step-3.5 routes with moe.gate


def _is_head(name: str, arch: Architecture) -> bool:
    return name.startswith("mtp.") or name.startswith(f"model.layers.{arch.num_layers}.")


def file_weights(raw: dict[str, np.ndarray], gguf_path: Path, arch: Architecture,
                 column_orders: dict[str, np.ndarray], splits: dict | None = None) -> dict[str, np.ndarray]:
    out, rounded = dict(raw), {Q8_0: 0, F16: 0}

    def as_stored(layout: np.ndarray) -> np.ndarray:
        if layout.shape[-1] % 32:  # the converter's fallback for rows Q8_0 cannot block
            rounded[F16] += layout.size
            return layout.astype(np.float16).astype(np.float32)
        rounded[Q8_0] += layout.size
        return dequantize(quantize(layout, Q8_0), Q8_0).reshape(layout.shape)

    for name, value in raw.items():
        if value.ndim < 2 or name.endswith(KEPT_FLOAT) or _is_head(name, arch):
            continue
        split = next((pair for suffix, pair in (splits or {}).items() if name.endswith(suffix)), None)
        if split is not None:
            out[name] = split[1]([as_stored(part.astype(np.float32)) for part in split[0](value)])
            continue
        order = column_orders.get(name)
        layout = value.astype(np.float32) if order is None else np.take(value.astype(np.float32), order, axis=1)
        values = as_stored(layout)
        out[name] = values if order is None else np.take(values, np.argsort(order), axis=1)
    head = tuple(f"blk.{i}." for i in range(arch.num_layers, arch.num_layers + arch.mtp_num_layers))
    for qtype, count in rounded.items():
        in_file = sum(int(np.prod(t.shape)) for t in GGUFReader(gguf_path).tensors
                      if t.tensor_type == qtype and not t.name.startswith(head))
        assert count == in_file, f"{count} values rounded to {qtype.name}, the file's trunk holds {in_file}"
    return out

