"""The FFNs as graphs: the dense SwiGLU MLP, and the sparse one: onnxruntime's fused `MoE` op plus the shared expert
(Qwen3.5-MoE's gated).

The `MoE` contrib op (com.microsoft, CPU kernel in onnxruntime 1.32) takes the router *logits*
and does Qwen3.5's routing itself: softmax over all experts, top-k, and with
`normalize_routing_weights=1` the k weights renormalized to sum to one (measured against numpy,
tests/graphs/test_moe_op.py). Its CPU kernel runs only the fused, interleaved SwiGLU layout
(`swiglu_fusion=1`: FC1 rows `[g0, u0, g1, u1, ...]`); with `activation_alpha=1`,
`activation_beta=0` and no `swiglu_limit` that is `silu(g) * u`. The shared expert and its
sigmoid gate are explicit ops: the op has no shared expert, and `GatedAdd` applies no sigmoid
on CPU.

    y = MoE(x, x @ router^T) + sigmoid(x @ shared_gate^T) * shared_mlp(x)

GLM-4.5's sigmoid routing is chosen in plain ops before the op (`moe_routing.py`), and its shared
expert has no gate.

Step-3.5 clamps some layers' SwiGLU after the activation, `min(silu(g), L) * clip(u, -L, L)`; the op's CPU kernel
clamps the gate before it (`swiglu_limit`: silu(min(g, L')) * clip(u, -L', L'); its after-activation mode is
CUDA-only). silu increases from its minimum (g = -1.28, where it is -0.28 < L), so min(silu(g), L) is
silu(min(g, L')) exactly for L' = silu^-1(L): the experts run with limit L', their up rows scaled by c = L' / L
(so the up clip at L' is c times the clip at L) and their down rows by 1 / c (`_clamp_scales`).

Experts the weight table quantizes go to `QMoE` instead: symmetric 4- / 8-bit blocks along K in
MatMulNBits' packing (`quant.quantize_experts`), `[E, N, K * bits / 8]` weights and
`[E, N, K / block]` scales, which its CPU kernel reads with the default zero point (measured:
tests/moe/test_moe_op.py). With accuracy_level 0 the 4-bit kernel keeps float activations.

Expert stacks are the largest tensors of a MoE model (2-3 GiB a layer at 35B-A3B in float32), so a large
one is written a few experts at a time, each expert read alone from the source (`read_experts`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as oir

from ..util.diagnostics import MtpcError
from ..ir import Architecture, MoeDims, QuantForm, WeightDecision
from ..ir.moe import SIGMOID
from ..weights.quant import quantize_experts
from ..weights import QuantizedTensor, Weight, WeightStore
from . import parameters
from .blocks import cast, initializer_name, project, project_all, silu
from .builder import MS, GraphBuilder
from .initializers import InitializerGroup, PlannedTensor
from .moe_routing import F32, scaled, sigmoid_routing, softmax_choice

FeedForward = Callable[[GraphBuilder, oir.Value, str], oir.Value]


def feed_forward(arch: Architecture, layer: int | None) -> FeedForward:
    """The FFN of trunk layer `layer` (None: the MTP block): the dense MLP, or the sparse MoE block, SwiGLU-clamped
    where the layer is (`Architecture.swiglu_limit`)."""
    moe = arch.moe
    limits = arch.swiglu_limit(layer)
    if moe is None or not arch.is_sparse(layer):
        return mlp if not limits[1] else (lambda b, x, prefix: mlp(b, x, prefix, limits[1]))
    return lambda b, x, prefix: sparse_moe(b, x, prefix, moe, limits)


def _clamp_scales(limit: float) -> tuple[float, float]:
    """(L', c) for a clamp after the activation at `limit` L: silu(L') = L, c = L' / L (the module docstring)."""
    g = max(limit, 1.0)
    for _ in range(60):  # Newton on g * sigmoid(g) = L, increasing and convex enough for g > 0
        s = 1.0 / (1.0 + np.exp(-g))
        g -= (g * s - limit) / (s + g * s * (1.0 - s))
    return g, g / limit


def mlp(b: GraphBuilder, x: oir.Value, prefix: str, limit: float = 0.0) -> oir.Value:
    """SwiGLU MLP; with a `limit` (Step-3.5's `swiglu_limits_shared`) min(silu(gate), L) * clip(up, -L, L)."""
    p = prefix + "mlp."
    with b.scope("mlp"):
        gate, up = project_all(b, x, [p + "gate_proj.weight", p + "up_proj.weight"])
        gate = silu(b, gate, "act")
        if limit:
            gate, up = swiglu_clamp(b, gate, up, limit)
        return project(b, b.op("Mul", [gate, up], name="Mul"), p + "down_proj.weight", "down_proj/MatMul")


def swiglu_clamp(b: GraphBuilder, gate: oir.Value, up: oir.Value, limit: float) -> tuple[oir.Value, oir.Value]:
    """(min(activated gate, L), clip(up, -L, L)): Step-3.5's clamp, after the activation."""
    dtype = b.io_dtype.numpy()
    bound, low = b.constant(f"limit_{limit:g}", np.asarray(limit, dtype)), b.constant(f"minus_limit_{limit:g}",
                                                                                     np.asarray(-limit, dtype))
    return (b.op("Min", [gate, bound], name="act/Min"), b.op("Clip", [up, low, bound], name="up/Clip"))


def interleave_gate_up(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """`[E, I, H]` gate and up -> `[E, 2I, H]` with rows `g0, u0, g1, u1, ...` (swiglu_fusion=1)."""
    e, i, h = gate.shape
    return np.stack([gate, up], axis=2).reshape(e, 2 * i, h)


def _expert_names(p: str) -> tuple[str, str, str]:
    """The routed experts' gate, up and down stacks under a layer's `mlp.` prefix."""
    return p + "experts.gate_proj.weight", p + "experts.up_proj.weight", p + "experts.down_proj.weight"


def _expert_decision(b: GraphBuilder, p: str) -> WeightDecision:
    """How the IR's weight table stores the routed experts: its `form` None for float MoE, else QMoE blocks.

    Gate and up are one FC1 input, and QMoE takes one block form for FC1 and FC2, so all three must agree.
    """
    decisions = [b.params.decision(n) for n in _expert_names(p)]
    if len({(d.form, d.accuracy_level) for d in decisions}) != 1:
        forms = ", ".join(f"{d.name}: {d.result}" for d in decisions)
        raise MtpcError.single(
            f"a MoE layer's experts are stored in one form, but the quantization rules give {forms}",
            hint="give mlp.experts.* one rule", path="quantization",
        )
    return decisions[0]


def _expert_weights(b: GraphBuilder, p: str, form: QuantForm | None, up_scale: float = 1.0
                    ) -> tuple[oir.Value | None, ...]:
    """FC1 (interleaved gate/up) and FC2 (down) of the routed experts: (fc1, fc1 scales, fc2, fc2 scales),
    float in the I/O dtype without scales, or QMoE's packed blocks.

    A stack large enough (`parameters.STREAM_BYTES`) is written a few experts at a time
    (`InitializerGroup.pieces`): every step is per expert (interleaving, casting) or per row (quantizing,
    converting blocks), so the slabs hold the whole stack's bytes, read expert by expert from the source.

    `up_scale` c multiplies the up rows and divides the down rows (a clamped layer's, `_clamp_scales`); those
    stacks are then read as float, whatever the source stores."""
    store = b.params.store
    gate_name, up_name, down_name = _expert_names(p)
    e, i, h = store.info(gate_name).shape
    fc1_name, fc2_name = initializer_name(p + "experts.gate_up_proj.weight"), initializer_name(down_name)
    as_float = form is None
    scales = {up_name: up_scale, down_name: 1.0 / up_scale} if up_scale != 1.0 else {}

    def read(name: str, a: int, z: int) -> Weight:
        if name in scales:
            return read_experts(store, name, a, z, as_float=True) * np.float32(scales[name])
        return read_experts(store, name, a, z, as_float=as_float)

    def whole(name: str, *, as_float: bool) -> Weight:
        if name in scales:
            return store.read_float(name) * np.float32(scales[name])
        return store.read_float(name) if as_float else store.read(name)

    if form is None:
        def fc1(a: int, z: int) -> tuple[np.ndarray, ...]:
            return (interleave_gate_up(read(gate_name, a, z), read(up_name, a, z)),)

        def fc1_whole() -> tuple[np.ndarray, ...]:
            return (interleave_gate_up(whole(gate_name, as_float=True), whole(up_name, as_float=True)),)

        groups = (
            _stacked_group(b, (PlannedTensor(fc1_name, b.io_dtype, (e, 2 * i, h)),), (gate_name, up_name), fc1,
                           fc1_whole),
            _stacked_group(b, (PlannedTensor(fc2_name, b.io_dtype, (e, h, i)),), (down_name,),
                           lambda a, z: (read(down_name, a, z),), lambda: (whole(down_name, as_float=True),)),
        )
        (w1,), (w2,) = (b.weights(g) for g in groups)
        return w1, None, w2, None

    def blocks(weight: Weight, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        return quantize_experts(weight, form, (_experts_in(weight, n), n, k))

    def fc1_blocks(gate: Weight, up: Weight) -> tuple[np.ndarray, ...]:
        # Interleaving rows commutes with quantizing them: each row's blocks are its own.
        (gate, gate_scales), (up, up_scales) = blocks(gate, i, h), blocks(up, i, h)
        return interleave_gate_up(gate, up), interleave_gate_up(gate_scales, up_scales)

    def planned(name: str, n: int, k: int) -> tuple[PlannedTensor, ...]:
        return (
            PlannedTensor(name.removesuffix(".weight") + ".qweight", oir.DataType.UINT8, (e, n, k * form.bits // 8)),
            PlannedTensor(name.removesuffix(".weight") + ".scales", b.io_dtype, (e, n, k // form.block_size)),
        )

    groups = (
        _stacked_group(b, planned(fc1_name, 2 * i, h), (gate_name, up_name),
                       lambda a, z: fc1_blocks(read(gate_name, a, z), read(up_name, a, z)),
                       lambda: fc1_blocks(whole(gate_name, as_float=False), whole(up_name, as_float=False))),
        _stacked_group(b, planned(fc2_name, h, i), (down_name,), lambda a, z: blocks(read(down_name, a, z), h, i),
                       lambda: blocks(whole(down_name, as_float=False), h, i)),
    )
    return tuple(v for g in groups for v in b.weights(g))


def _experts_in(weight: Weight, n: int) -> int:
    """How many experts of `n` rows each a stack (or a slab of one) holds."""
    rows = weight.shape[0] if isinstance(weight, QuantizedTensor) else weight.shape[0] * weight.shape[1]
    return rows // n


def _stacked_group(b: GraphBuilder, planned: tuple[PlannedTensor, ...], names: tuple[str, ...],
                   make: Callable[[int, int], tuple[np.ndarray, ...]],
                   whole: Callable[[], tuple[np.ndarray, ...]]) -> InitializerGroup:
    """Tensors `[E, ...]` made from the expert stacks `names`: whole (`whole`), or, when large, `make(a, z)`
    for experts `a:z` at a time (about `parameters.STREAM_BYTES` per slab, of float32 source rows or of the
    first tensor, whichever is larger), the source pages of those experts given back as soon as their slab
    is made."""
    store = b.params.store
    e = planned[0].shape[0]
    # A slab's memory is its float32 source rows (what QMoE's blocks are made from, 8x their int4 bytes) or
    # its first tensor, whichever is larger.
    source_elements = sum(int(np.prod(store.info(name).shape[1:])) for name in names)
    per_expert = max(planned[0].nbytes // max(1, e), 4 * source_elements)

    def slab(a: int, z: int) -> tuple[np.ndarray, ...]:
        arrays = make(a, z)
        for name in names:
            release_experts(store, name, a, z)
        return arrays

    def pieces() -> list[Callable[[], tuple[np.ndarray, ...]]]:
        step = max(1, parameters.STREAM_BYTES // max(1, per_expert))
        return [lambda a=a: slab(a, min(a + step, e)) for a in range(0, e, step)]

    def written() -> None:
        for name in names:
            b.params.release(name)

    streams = per_expert * e >= parameters.STREAM_BYTES
    return InitializerGroup(planned, whole, pieces if streams else None, written=written)


def read_experts(store: WeightStore, name: str, start: int, stop: int, *, as_float: bool) -> Weight:
    """Experts `start:stop` of the stack `name`: `read_float`'s values (`as_float`) or `read`'s (a
    `QuantizedTensor` of their rows where the source's blocks are kept), read alone where the store can
    (`read_experts` of the HF and GGUF stores), else sliced from the whole stack (arrays in memory)."""
    read = getattr(store, "read_experts", None)
    if read is not None:
        return read(name, start, stop, as_float=as_float)
    whole = store.read_float(name) if as_float else store.read(name)
    if isinstance(whole, QuantizedTensor):
        n = whole.shape[0] // store.info(name).shape[0]
        return whole.rows(start * n, stop * n)
    return whole[start:stop]


def release_experts(store: WeightStore, name: str, start: int, stop: int) -> None:
    """The source pages of experts `start:stop` leave the process, where the store can say which they are."""
    release = getattr(store, "release_experts", None)
    if release is not None:
        release(name, start, stop)


def sparse_moe(b: GraphBuilder, x: oir.Value, prefix: str, moe: MoeDims, limits: tuple[float, float] = (0.0, 0.0)
               ) -> oir.Value:
    """`limits`: the SwiGLU clamps of the routed experts and of the shared expert (0: none)."""
    p = prefix + "mlp."
    with b.scope("moe"):
        # The router scores in float32 whatever the I/O dtype (its weight is float32: WeightRole.ROUTER), as
        # transformers' routers do: a float16 score can pick another expert than the checkpoint's.
        x32 = cast(b, x, F32, "router/Cast", b.io_dtype)
        logits = project(b, x32, p + "gate.weight", "router/MatMul")
        logits = b.op("Reshape", [logits, b.i64(f"router_shape_{moe.num_experts}", [-1, moe.num_experts])],
                      name="router/Reshape")
        factor = None
        if moe.scoring == SIGMOID:
            logits, factor = sigmoid_routing(b, logits, moe, p)
        else:
            logits = softmax_choice(b, logits, moe)
        decision = _expert_decision(b, p)
        form = decision.form
        op_limit, up_scale = _clamp_scales(limits[0]) if limits[0] else (None, 1.0)
        fc1, scales1, fc2, scales2 = _expert_weights(b, p, form, up_scale)
        # Sigmoid routing hands the op -inf off the chosen experts, so its renormalization gives GLM's weights.
        normalize = moe.normalize_top_k or moe.scoring == SIGMOID
        attrs = {"k": moe.top_k, "activation_type": "swiglu", "swiglu_fusion": 1, "activation_alpha": 1.0,
                 "activation_beta": 0.0, "normalize_routing_weights": int(normalize)}
        if op_limit is not None:
            attrs["swiglu_limit"] = op_limit
        if form is None:
            routed = b.op("MoE", [x, logits, fc1, None, fc2], attrs, name="MoE", domain=MS)
        else:
            attrs.update(expert_weight_bits=form.bits, block_size=form.block_size,
                         accuracy_level=decision.accuracy_level)
            routed = b.op("QMoE", [x, logits, fc1, scales1, None, fc2, scales2], attrs, name="QMoE", domain=MS)
        if moe.scoring == SIGMOID:
            routed = scaled(b, routed, x, factor, moe)
    with b.scope("shared_expert"):
        s = p + "shared_expert."
        gate = silu(b, project(b, x, s + "gate_proj.weight", "gate_proj/MatMul"), "act")
        up = project(b, x, s + "up_proj.weight", "up_proj/MatMul")
        if limits[1]:
            gate, up = swiglu_clamp(b, gate, up, limits[1])
        shared = project(b, b.op("Mul", [gate, up], name="Mul"), s + "down_proj.weight", "down_proj/MatMul")
        if moe.shared_expert_sigmoid_gate:
            scale = b.op("Sigmoid", [project(b, x, p + "shared_expert_gate.weight", "gate/MatMul")], name="gate/Sigmoid")
            shared = b.op("Mul", [shared, scale], name="gate/Mul")
    return b.op("Add", [routed, shared], name="moe/Add")
