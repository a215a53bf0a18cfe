"""The model a Q8_0 GGUF of llama.cpp's converter holds, as transformers takes it: the release's tensors with
each weight the converter quantizes replaced by its Q8_0 rounding, computed here with gguf-py.

Q8_0 rounds blocks of 32 along a row, independently per row: a converter that only moves, splits or stacks
rows (Qwen3-Next's `in_proj_qkvz` split, experts stacked) rounds each row as the release holds it, so the
rounding is done in the release's layout; a converter that permutes columns (Qwen3.5's tiled value heads on
`out_proj`) is given the permutation (`Family.column_orders`). The converter keeps float what it routes with
or convolves with (routers, the shared expert's gate, the conv kernel) and every 1-D tensor. The head's
tensors are left as they are: transformers has no MTP head. As a check that the rule matches the file, the
rounded weights must hold as many values as the file's trunk Q8_0 tensors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize

from mtpc.ir import Architecture

Q8_0 = GGMLQuantizationType.Q8_0
KEPT_FLOAT = ("mlp.gate.weight", "shared_expert_gate.weight", "conv1d.weight")


def _is_head(name: str, arch: Architecture) -> bool:
    return name.startswith("mtp.") or name.startswith(f"model.layers.{arch.num_layers}.")


def file_weights(raw: dict[str, np.ndarray], gguf_path: Path, arch: Architecture,
                 column_orders: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out, rounded = dict(raw), 0
    for name, value in raw.items():
        if value.ndim < 2 or name.endswith(KEPT_FLOAT) or _is_head(name, arch):
            continue
        order = column_orders.get(name)
        layout = value.astype(np.float32) if order is None else np.take(value.astype(np.float32), order, axis=1)
        values = dequantize(quantize(layout, Q8_0), Q8_0).reshape(layout.shape)
        out[name] = values if order is None else np.take(values, np.argsort(order), axis=1)
        rounded += value.size
    head = tuple(f"blk.{i}." for i in range(arch.num_layers, arch.num_layers + arch.mtp_num_layers))
    in_file = sum(int(np.prod(t.shape)) for t in GGUFReader(gguf_path).tensors
                  if t.tensor_type == Q8_0 and not t.name.startswith(head))
    assert rounded == in_file, f"{rounded} values rounded, the file's trunk holds {in_file} in Q8_0"
    return out

