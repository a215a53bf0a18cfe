"""The weight part of the IR: how each weight is stored, as the spec asks and the source allows.

`QuantizationPlan` is the spec's rules as lowered; `SourceTensor` a weight as the source
stores it (metadata only); `WeightDecision` the stored form passes/quantization.py chose for
each weight, which graph builders and emitters read. Frozen dataclasses like the rest of the
IR (`mtpc.ir` re-exports them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .fields import added


@dataclass(frozen=True)
class QuantScheme:
    """How one weight is stored. `bits=None` means float in the I/O dtype."""

    bits: int | None = None
    block_size: int = 32
    # Keep the source's own encoding (e.g. GGUF Q4_0/Q8_0 carried over losslessly, or float as-is).
    keep_source: bool = False
    # MatMulNBits accuracy_level; None: the runtime profile's (passes/quantization.py settles it).
    accuracy_level: int | None = None
    # False: asymmetric blocks with uint8 zero points (for weights whose blocks are not centred on zero).
    symmetric: bool = True
    # With symmetric False and 4 bits: each block's minimum kept in float (a zero point in the scale dtype, as
    # GGUF's Q4_K stores it), scale and minimum fitted by llama.cpp's k-quant search (`quant.quantize_linear`).
    # Set by presets (`weights/presets.py`); the spec has no field for it.
    float_zero_points: bool = added(False)

    def irrelevant_fields(self) -> frozenset[str]:
        """Fields that do not change how a weight is stored: a float weight has no blocks. `diff` leaves
        them out, so raising the default block_size does not show on an override that keeps a weight float."""
        if self.bits is None and not self.keep_source:
            return frozenset({"block_size", "symmetric", "accuracy_level"})
        return frozenset()


@dataclass(frozen=True)
class QuantForm:
    """A block-quantized encoding onnxruntime's MatMulNBits / GatherBlockQuantized read."""

    bits: int
    block_size: int
    has_zero_points: bool
    # Zero points in the scale dtype `[N, k_blocks]` rather than packed integers (MatMulNBits, 2 / 4 bits).
    float_zero_points: bool = False
    # A per-block offset `[N, k_blocks]` added to every weight of its block; neither op has one,
    # so the graph adds it (GGUF Q5_1 / Q5_K, and Q4_1 / Q4_K / Q2_K embeddings: `sources/gguf/quant.py`).
    block_offsets: bool = False


@dataclass(frozen=True)
class SourceTensor:
    """A weight as the source stores it (metadata only: weights never live in the IR)."""

    name: str  # canonical (see mtpc.weights)
    shape: tuple[int, ...]
    encoding: str  # "float32", "bfloat16", "Q8_0", "Q4_K", ...
    # The block form the source's reader hands out without dequantizing; None: it reads as float.
    carried: QuantForm | None = None
    # False when the encoding has no exact form in onnxruntime's block-quantized ops at all (GGUF
    # IQ2_XXS, ...), as opposed to one this tensor's layout cannot take (columns regrouped across blocks).
    has_exact_form: bool = True

    @property
    def is_quantized(self) -> bool:
        return not self.encoding.startswith(("float", "bfloat"))


class WeightRole(str, enum.Enum):
    LINEAR = "linear"  # a MatMul operand: float or MatMulNBits
    EMBEDDING = "embedding"  # a Gather table: float or GatherBlockQuantized
    TENSOR = "tensor"  # norms, conv kernels, gate vectors: always float
    EXPERTS = "experts"  # a MoE layer's stacked routed experts `[E, N, K]`: float for MoE, or QMoE blocks
    # A MoE router `mlp.gate.weight` `[E, H]`: float32 in every package, because the experts a token gets are
    # chosen from its scores (transformers' routers score in float32; llama-quantize never quantizes them).
    ROUTER = "router"


@dataclass(frozen=True)
class WeightDecision:
    """How one weight is stored in the package, and which rule decided it (`passes/quantization.py`)."""

    name: str
    role: WeightRole
    source: str  # SourceTensor.encoding
    form: QuantForm | None  # None: float in the I/O dtype
    rule: str  # "default", "override 2 (mtp.fc.weight)", with "keep: source" when the scheme keeps it
    # The stored values equal the source's (a kept block encoding, an exact float, gguf-py's dequantization in float32).
    lossless: bool
    io_dtype: str = "float32"
    # MatMulNBits' accuracy_level (a MatMul operand stored quantized; 0 otherwise).
    accuracy_level: int = 0

    @property
    def result(self) -> str:
        if self.form is None:
            return self.io_dtype
        if self.role is WeightRole.EMBEDDING:
            return f"int{self.form.bits} GatherBlockQuantized block {self.form.block_size}"
        if self.role is WeightRole.EXPERTS:
            return f"int{self.form.bits} QMoE block {self.form.block_size} accuracy {self.accuracy_level}"
        return f"int{self.form.bits} MatMulNBits block {self.form.block_size} accuracy {self.accuracy_level}"


@dataclass(frozen=True)
class QuantOverride:
    match: str  # fnmatch pattern over canonical weight names, e.g. "mtp.fc.weight" or "layers.*.mlp.*"
    scheme: QuantScheme
    # Set on the overrides a `quantization.default.preset` expands into: the weight's rule, e.g.
    # "preset q4_k_m: the LM head (Q6_K)"; empty for the spec's own overrides.
    label: str = added("")


@dataclass(frozen=True)
class QuantizationPlan:
    default: QuantScheme = field(default_factory=QuantScheme)
    overrides: tuple[QuantOverride, ...] = ()
    # The rule of a weight no override matches when the default is a preset's ("preset q4_k_m: Q4_K").
    default_label: str = added("")

    def scheme_for(self, weight_name: str) -> QuantScheme:
        index = self.deciding_override(weight_name)
        return self.default if index is None else self.overrides[index].scheme

    def deciding_override(self, weight_name: str) -> int | None:
        """Index of the override that sets `weight_name`'s scheme (first match wins, as in the spec's order)."""
        from fnmatch import fnmatchcase

        return next((i for i, o in enumerate(self.overrides) if fnmatchcase(weight_name, o.match)), None)
