"""The graphs' I/O contracts and the decoders as runtimes see them (part of the IR; `mtpc.ir` re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .enums import AttentionMode, LayerKind
from .fields import added

# ----------------------------------------------------------------------------- I/O contracts

Dim = int | str  # a static size or a symbolic dimension name


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # "float32" | "float16" | "bfloat16" | "int64" | "int32"
    shape: tuple[Dim, ...]


@dataclass(frozen=True)
class GraphContract:
    """The inputs and outputs of one ONNX graph, in graph order."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        return _find(self.inputs, name, "input")

    def output(self, name: str) -> TensorSpec:
        return _find(self.outputs, name, "output")

    def has_input(self, name: str) -> bool:
        return any(t.name == name for t in self.inputs)

    def has_output(self, name: str) -> bool:
        return any(t.name == name for t in self.outputs)

    def all(self) -> Iterator[TensorSpec]:
        yield from self.inputs
        yield from self.outputs


def _find(tensors: tuple[TensorSpec, ...], name: str, what: str) -> TensorSpec:
    for t in tensors:
        if t.name == name:
            return t
    raise KeyError(f"no graph {what} named {name!r}")


# ----------------------------------------------------------------------------- runtime view


@dataclass(frozen=True)
class StateGroup:
    kind: str  # "paged_kv" | "fixed_conv" | "fixed_recurrent"
    layer_ids: tuple[int, ...]
    # Compact per-token transitions a fixed group exposes so the paged engine can keep only an
    # accepted prefix of a verify step (0: none); the recurrent group also says its key-head count.
    state_update_capacity: int = 0
    key_head_count: int = 0


@dataclass(frozen=True)
class SlidingWindow:
    window_size: int
    layers: tuple[int, ...]


@dataclass(frozen=True)
class SharedInitializer:
    name: str
    data_file: str
    offset: int
    length: int
    data_type: int  # onnx TensorProto enum
    shape: tuple[int, ...]


@dataclass(frozen=True)
class DecoderConfig:
    """One decoder as a runtime sees it: the graph file, its names and its dims.

    `inputs` / `outputs` map onnxruntime-genai's role keys (`input_ids`,
    `past_key_names`, `hidden_states`, ...) to graph names or `%d` templates;
    `contract` lists the concrete tensors of the graph. The MTP head's decoder
    config is projected from the main one (`passes/mtp_projection.py`).
    """

    filename: str
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_size: int
    layer_kinds: tuple[LayerKind, ...]
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    contract: GraphContract
    attention: AttentionMode = AttentionMode.DENSE
    execution_provider: str = "cpu"
    session_options: tuple[tuple[str, str], ...] = ()
    state_groups: tuple[StateGroup, ...] = ()
    sliding_window: SlidingWindow | None = None
    # Linear-attention conv/recurrent state metadata; a single full-attention layer has none.
    conv_kernel: int = 0
    shared_initializers: tuple[SharedInitializer, ...] = ()
    # Tokens of a verify step whose conv / recurrent transitions the graph captures (paged hybrids
    # with a head; decoder.state_update_capacity). 0: none.
    state_update_capacity: int = 0
    # W > 1: the conv / recurrent state I/O is windowed, `[W, batch, ...]`, slot j the state after token
    # T - W + j of a T-token forward (onnxruntime-genai's croppable recurrent state). 0: unwindowed.
    state_window: int = added(0)

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layer_kinds)

    def input_name(self, role: str) -> str | None:
        return dict(self.inputs).get(role)

    def output_name(self, role: str) -> str | None:
        return dict(self.outputs).get(role)
