"""Graph-building mechanics shared by every graph: named ops, constants, weights, contract I/O.

Nodes are recorded on an onnx-ir Tape with explicit names (`/<scope>/<op>`),
their outputs named after the node, so the same IR always gives the same graph
bytes. Weights are planned initializers (`initializers.py`) whose values live in
the graph's external data file; small constants (shapes, frequency tables) are
stored inline in the proto.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import onnx_ir as oir

from ..ir import GraphContract, TensorSpec
from ..profiles.kernels import NO_FUSION, FusedKernels
from .initializers import DataFile, InitializerGroup
from .parameters import DTYPES, ParameterSource

# RMSNormalization is an ONNX op from opset 23; onnxruntime's own SimplifiedLayerNormalization sits in the
# default domain without an ONNX schema, which onnx.checker rejects.
OPSETS = {"": 23, "com.microsoft": 1}
IR_VERSION = 11
MS = "com.microsoft"

ONNX_DTYPES = {**DTYPES, "int64": oir.DataType.INT64, "int32": oir.DataType.INT32}


@dataclass(frozen=True)
class BuiltGraph:
    model: oir.Model
    data: DataFile  # the graph's own data file (it may also read tensors from `GraphData.shared`)


@dataclass(frozen=True)
class GraphData:
    """Where a graph's weights go: its own data file, or a file shared with another graph.

    A group the shared file already holds is read from there (one copy); a group that
    `to_shared` selects and the shared file lacks is placed there, for the other graph to find.
    """

    graph_relpath: str
    own: DataFile
    shared: DataFile | None = None
    to_shared: Callable[[str], bool] = lambda name: False


class GraphBuilder:
    def __init__(self, graph_name: str, params: ParameterSource, data: GraphData,
                 kernels: FusedKernels = NO_FUSION):
        self.graph_name = graph_name
        self.params = params
        self.kernels = kernels  # the fused onnxruntime kernels this graph's execution provider runs
        self.io_dtype = params.io_dtype
        self.placement = data
        self.data = data.own
        self.tape = oir.tape.Tape()
        self.inputs: dict[str, oir.Value] = {}
        self._initializers: dict[str, oir.Value] = {}
        self._scope: list[str] = []
        self._node_names: set[str] = set()

    # ------------------------------------------------------------------ naming

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _node_name(self, local: str) -> str:
        name = "/" + "/".join([*self._scope, local])
        if name in self._node_names:
            raise AssertionError(f"node name {name!r} used twice")
        self._node_names.add(name)
        return name

    # ------------------------------------------------------------------ ops

    def op(self, op_type: str, inputs: Sequence[oir.Value | None], attrs: dict | None = None, *, name: str,
           domain: str = "") -> oir.Value:
        return self.op_multi(op_type, inputs, attrs, name=name, domain=domain, num_outputs=1)[0]

    def op_multi(self, op_type: str, inputs: Sequence[oir.Value | None], attrs: dict | None = None, *, name: str,
                 num_outputs: int, domain: str = "") -> Sequence[oir.Value]:
        node_name = self._node_name(name)
        outputs = [oir.Value(name=f"{node_name}/output_{i}") for i in range(num_outputs)]
        return self.tape.op_multi_out(
            op_type, list(inputs), attrs, outputs=outputs, domain=domain, name=node_name
        )

    @contextlib.contextmanager
    def subgraph(self) -> Iterator[list]:
        """Nodes built inside go to a graph of their own (an If branch), not this one; they may read this
        graph's values. The list yielded receives the nodes when the block ends."""
        outer, self.tape = self.tape, oir.tape.Tape()
        nodes: list = []
        try:
            yield nodes
        finally:
            nodes.extend(self.tape.nodes)
            self.tape = outer

    def branch(self, name: str, build: Callable[[], Sequence[oir.Value]]) -> oir.Graph:
        """An If branch: `build()` makes its nodes and returns its outputs (each produced by a node inside)."""
        with self.subgraph() as nodes:
            outputs = list(build())
            for i, value in enumerate(outputs):
                if value.producer() is None or value.producer() not in self.tape.nodes:
                    outputs[i] = self.op("Identity", [value], name=f"{name}/output_{i}")
        return oir.Graph([], outputs, nodes=nodes, name=name)

    # ------------------------------------------------------------------ constants and weights

    def constant(self, local: str, value: np.ndarray) -> oir.Value:
        """A small inline constant, named after the current scope."""
        name = "/".join([*self._scope, local]) if self._scope else local
        if name in self._initializers:
            return self._initializers[name]
        tensor = oir.tensor(np.array(value, order="C"), name=name)  # ascontiguousarray would make 0-d arrays 1-d
        v = oir.Value(name=name, shape=oir.Shape(value.shape), type=oir.TensorType(tensor.dtype), const_value=tensor)
        self._initializers[name] = v
        return v

    def i64(self, local: str, values: Sequence[int]) -> oir.Value:
        return self.constant(local, np.asarray(values, np.int64))

    def weights(self, group: InitializerGroup) -> tuple[oir.Value, ...]:
        """Initializer values for a planned group; a group already added (same names) is reused."""
        first = group.tensors[0].name
        if first in self._initializers:
            return tuple(self._initializers[t.name] for t in group.tensors)
        files = [f for f in (self.placement.own, self.placement.shared) if f is not None]
        home = next((f for f in files if f.holds(group)), None)
        if home is None:
            shared = self.placement.shared
            home = shared if shared is not None and self.placement.to_shared(first) else self.placement.own
            home.add(group)
        location = home.location_from(self.placement.graph_relpath)
        values = []
        for t in group.tensors:
            v = oir.Value(
                name=t.name, shape=oir.Shape(t.shape), type=oir.TensorType(t.dtype),
                const_value=home.external_tensor(t, location),
            )
            self._initializers[t.name] = v
            values.append(v)
        return tuple(values)

    # ------------------------------------------------------------------ I/O

    def declare_inputs(self, contract: GraphContract) -> None:
        for spec in contract.inputs:
            self.inputs[spec.name] = oir.Value(
                name=spec.name, type=oir.TensorType(ONNX_DTYPES[spec.dtype]), shape=_shape(spec)
            )

    def finish(self, contract: GraphContract, outputs: dict[str, oir.Value]) -> BuiltGraph:
        """Bind computed values to the contract's outputs (names, dtypes, shapes, order) and make the model."""
        missing = [s.name for s in contract.outputs if s.name not in outputs]
        extra = sorted(set(outputs) - {s.name for s in contract.outputs})
        if missing or extra:
            raise AssertionError(f"{self.graph_name}: outputs missing {missing}, not in contract {extra}")
        graph_outputs: list[oir.Value] = []
        for spec in contract.outputs:
            value = outputs[spec.name]
            # A graph output must be produced by a node of its own name: copy inputs, constants and
            # values that already serve as another output.
            if value.producer() is None or any(value is v for v in graph_outputs):
                value = self.op("Identity", [value], name=f"outputs/{spec.name}")
            value.name = spec.name
            value.type = oir.TensorType(ONNX_DTYPES[spec.dtype])
            value.shape = _shape(spec)
            graph_outputs.append(value)
        graph = oir.Graph(
            [self.inputs[s.name] for s in contract.inputs],
            graph_outputs,
            nodes=self.tape.nodes,
            initializers=list(self._initializers.values()),
            opset_imports=dict(OPSETS),
            name=self.graph_name,
        )
        return BuiltGraph(oir.Model(graph, ir_version=IR_VERSION, producer_name="mtpc"), self.data)


def _shape(spec: TensorSpec) -> oir.Shape:
    return oir.Shape([d if isinstance(d, int) else oir.SymbolicDim(d) for d in spec.shape])
