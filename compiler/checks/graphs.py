"""ONNX graphs as the contract checks see them: names, dtypes and shapes, never weights.

A graph is parsed from its `.onnx` bytes without its external data; an initializer stored
externally is described by where it says its bytes are, so a data file can be measured by
its size without being read. A graph not built yet (`check SPEC`, `plan`) is described by
the I/O contract it is built to (`interface_graph`): its inputs and outputs only, so the
checks of what it holds (initializers, external data) wait for its bytes, as in `compile`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by read_graph: `mtpc inspect` and the CLI's start-up need no onnx
    import onnx


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # numpy-style name ("float32", "int64", ...)
    shape: tuple[int | str | None, ...] | None  # None: rank unknown

    @property
    def width(self) -> int | str | None:
        return self.shape[-1] if self.shape else None


@dataclass(frozen=True)
class ExternalTensor:
    """An initializer whose bytes live in a data file, as the graph describes them."""

    name: str
    location: str | None
    offset: str | None  # the raw external_data values; malformed ones are findings
    length: str | None
    nbytes: int | None  # what its dims and type need (the runtime's length when none is given); None: not fixed


@dataclass(frozen=True)
class PackedReader:
    """A MatMulNBits node, as it reads one packed weight: its encoding and the companions it takes."""

    bits: int
    block_size: int | None
    scales: str | None
    zero_points: str | None  # None: the op's default zero point


@dataclass
class Graph:
    relpath: str
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    initializers: dict[str, Tensor]
    external: tuple[ExternalTensor, ...]
    initializer_types: dict[str, int] = field(default_factory=dict)  # name -> onnx TensorProto data type
    # Packed weight name -> the MatMulNBits node that reads it (the first, should several).
    packed_readers: dict[str, PackedReader] = field(default_factory=dict)
    # Only the inputs and outputs are known (a graph not built yet): what it holds is not checked.
    interface_only: bool = False
    # The model's metadata_props (the sizes a vision graph was built for: graphs/vision.py).
    metadata: dict[str, str] = field(default_factory=dict)


def interface_graph(relpath: str, contract) -> Graph:
    """A graph not built yet, as its I/O contract (`mtpc.ir.GraphContract`) declares it: the builder
    declares exactly these inputs and binds exactly these outputs (tests/emit/test_graph_files.py
    compares them with the built graph's, for every shipped spec)."""
    def tensors(specs) -> dict[str, Tensor]:
        return {t.name: Tensor(t.name, t.dtype, tuple(t.shape)) for t in specs}

    return Graph(relpath, tensors(contract.inputs), tensors(contract.outputs), {}, (), interface_only=True)


def _stored_bytes(init: "onnx.TensorProto") -> int | None:
    """Bytes the initializer's dims and type take in a data file; None where that is not fixed."""
    import numpy as np
    import onnx
    from onnx import TensorProto

    # Types packed several to a byte; the others take whole bytes (numpy's itemsize).
    packed_bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.INT2: 2, TensorProto.UINT2: 2}
    if init.data_type in (TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2):
        return None
    bits = packed_bits.get(init.data_type)
    if bits is None:
        try:
            bits = 8 * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
        except (KeyError, TypeError, ValueError):  # a type this onnx does not know
            return None
    return -(-math.prod(init.dims) * bits // 8)


def _tensor_from_value_info(vi: "onnx.ValueInfoProto") -> Tensor:
    import onnx

    t = vi.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "undefined"
    shape = None
    if t.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return Tensor(vi.name, dtype, shape)


def read_graph(data: bytes, relpath: str) -> Graph:
    import onnx

    model = onnx.load_model_from_string(data)
    g = model.graph
    initializers = {}
    external = []
    for init in g.initializer:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name if init.data_type else "undefined"
        initializers[init.name] = Tensor(init.name, dtype, tuple(init.dims))
        if init.data_location == onnx.TensorProto.EXTERNAL:
            entries = {entry.key: entry.value for entry in init.external_data}
            external.append(
                ExternalTensor(init.name, entries.get("location"), entries.get("offset"), entries.get("length"), _stored_bytes(init))
            )
    # Graph inputs that are also initializers are constants with a default, not runtime inputs.
    inputs = {vi.name: _tensor_from_value_info(vi) for vi in g.input if vi.name not in initializers}
    outputs = {vi.name: _tensor_from_value_info(vi) for vi in g.output}
    types = {init.name: init.data_type for init in g.initializer}
    metadata = {p.key: p.value for p in model.metadata_props}
    return Graph(relpath, inputs, outputs, initializers, tuple(external), types, _packed_readers(g), metadata=metadata)


def _packed_readers(g: "onnx.GraphProto") -> dict[str, PackedReader]:
    import onnx

    readers: dict[str, PackedReader] = {}
    for node in g.node:
        if node.op_type != "MatMulNBits" or len(node.input) < 2 or node.input[1] in readers:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        optional = [name or None for name in node.input[2:4]] + [None, None]
        readers[node.input[1]] = PackedReader(attrs.get("bits", 4), attrs.get("block_size"), optional[0], optional[1])
    return readers

