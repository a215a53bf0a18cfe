"""ONNX graphs compared by meaning, not by bytes.

A graph becomes a plain summary that `changes.diff_values` compares like any
other tree: its interface (`inputs` / `outputs` by name, with dtype and
symbolic shape), an operator histogram (`ops`, "domain::op" -> count), every
node by name (op, wiring, attributes), every initializer by name (dtype, shape,
where its bytes live) and the opsets. Only the graph proto is parsed: external
data (the `.onnx.data` weights) is never read, whatever its size.

A weight file (`.onnx.data`) has no structure of its own; its stored forms are
told by the graph's initializers and the package's `quantization.json`, which
are diffed by name. The file itself gets one short last-resort line saying
whether its bytes differ, and a note naming where the meaning of the change is.
"""

from __future__ import annotations

import hashlib

from ..util.lazy_import import lazy_module

# Imported when a graph is first summarized: `plan` and `diff` import this module for what it says
# of data files, and a plan that compares no graph needs no onnx.
onnx = lazy_module("onnx")

# The parts of a summary that make a graph's interface: what runs it must change when they do.
INTERFACE = ("inputs", "outputs")


def _dtype(elem_type: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):  # bfloat16, float8 ...: numpy has no name for them
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _value_info(v: onnx.ValueInfoProto) -> dict:
    entry: dict = {"name": v.name}
    if v.type.HasField("tensor_type"):
        t = v.type.tensor_type
        entry["dtype"] = _dtype(t.elem_type)
        if t.HasField("shape"):
            entry["shape"] = _shape(d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in t.shape.dim)
    else:
        entry["type"] = v.type.WhichOneof("value")
    return entry


def _shape(dims) -> str:
    """A shape as one value, `[batch_size, 2, 64]`: a reshaped tensor is one change, not one per axis."""
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _attribute(a: onnx.AttributeProto) -> object:
    if a.type == onnx.AttributeProto.TENSOR:
        return f"tensor {_dtype(a.t.data_type)} {_shape(a.t.dims)} {_digest(a.t.SerializeToString())}"
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "<subgraph>"
    value = onnx.helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):  # one value, like a shape: `perm: [0, 2, 1, 3] -> [0, 1, 2, 3]`
        return _shape(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value)
    return value


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# Block-quantized ops: which input holds which part of an encoded weight.
_BLOCK_INPUTS = {
    "MatMulNBits": {1: "weight", 2: "scales", 3: "zero points"},
    "GatherBlockQuantized": {0: "weight", 2: "scales", 3: "zero points"},
}


def _encodings(g: onnx.GraphProto) -> dict[str, str]:
    """Initializer name -> how it is encoded, told by the block-quantized op that reads it
    (`int4 MatMulNBits block 32: weight`); an initializer no such op reads has none but its dtype."""
    out: dict[str, str] = {}
    for node in g.node:
        parts = _BLOCK_INPUTS.get(node.op_type)
        if parts is None or node.domain != "com.microsoft":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        form = f"int{attrs.get('bits', 4)} {node.op_type} block {attrs.get('block_size', '?')}"
        for index, part in parts.items():
            if index < len(node.input) and node.input[index]:
                out.setdefault(node.input[index], f"{form}: {part}")
    return out


def _initializer(t: onnx.TensorProto, encoding: str | None) -> dict:
    entry: dict = {"name": t.name, "dtype": _dtype(t.data_type), "shape": _shape(t.dims)}
    if encoding:  # a plain tensor's encoding is its dtype, already there
        entry["encoding"] = encoding
    if t.data_location == onnx.TensorProto.EXTERNAL:
        # The file only: the offset moves with every earlier weight's size, the length with dtype and shape.
        location = next((e.value for e in t.external_data if e.key == "location"), "?")
        entry["stored"] = f"external {location}"
    else:
        # Small constants (axes, shapes, rotary tables) live in the proto: their values are part of the graph.
        entry["stored"] = "inline " + _digest(t.SerializeToString())
    return entry


def _unique(names: list[str], fallback: list[str]) -> list[str]:
    """Node names made unique (an unnamed node is called after its op), so nodes can be matched by name."""
    seen: dict[str, int] = {}
    out = []
    for name, alt in zip(names, fallback):
        key = name or alt
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(key if n == 0 else f"{key}#{n}")
    return out


def _op(node: onnx.NodeProto) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _nodes(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Every node of `g`, those in its subgraphs (an If's branches) too, each after the node holding it."""
    out = []
    for node in g.node:
        out.append(node)
        for a in node.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                        list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                out += _nodes(sub)
    return out


def graph_summary(model: onnx.ModelProto) -> dict:
    """The comparable meaning of a graph: interface, op histogram, nodes (subgraphs' included), initializers, opsets."""
    g = model.graph
    every = _nodes(g)
    ops: dict[str, int] = {}
    for node in every:
        ops[_op(node)] = ops.get(_op(node), 0) + 1
    names = _unique([n.name for n in every], [n.op_type for n in every])
    encodings = _encodings(g)
    nodes = [
        {
            "name": name,
            "op": _op(node),
            "inputs": list(node.input),
            "outputs": list(node.output),
            "attributes": {a.name: _attribute(a) for a in node.attribute},
        }
        for name, node in zip(names, every)
    ]
    return {
        "opsets": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "inputs": [_value_info(v) for v in g.input],
        "outputs": [_value_info(v) for v in g.output],
        "ops": dict(sorted(ops.items())),
        "nodes": nodes,
        "initializers": [_initializer(t, encodings.get(t.name)) for t in g.initializer],
        "metadata": {p.key: p.value for p in model.metadata_props},
    }


def parse_graph(data: bytes) -> onnx.ModelProto:
    """The graph proto alone: external data stays a reference, so no weight byte is read."""
    return onnx.load_model_from_string(data)


def summary_of(data: bytes) -> dict:
    return graph_summary(parse_graph(data))


def data_file_note(relpath: str, changed_files: set[str]) -> str:
    """Where a reviewer finds what a changed weight file's change means."""
    graph = relpath.removesuffix(".data")
    told = [f for f in (graph, "quantization.json") if f in changed_files]
    if told:
        return "weights' stored forms: see " + " and ".join(f"`{f}`" for f in told)
    return "no stored form changed in the graph or in quantization.json: the weights' values differ"
