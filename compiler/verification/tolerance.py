"""How closely a package must match the reference in `mtpc verify`, and the weights the reference computes with.

A quantized build is compared with a reference that reads the weights as the package
stores them (`AsBuiltWeights`), so the bound covers the runtime's arithmetic, not the
rounding of the weights (see `tolerance_for`).
"""

from __future__ import annotations

from ..util.lazy_import import lazy_module

np = lazy_module("numpy")  # imported when a package is verified, not by every `mtpc` run (`--help` builds this verb's parser)


def tolerance_for(ir, weights, atol: float | None):
    """Allowed deviation of an output (relative to the largest reference value), by how it was built.

    The reference is float64 from the source's weights, quantized and dequantized
    as the build stores them (`AsBuiltWeights`): what is left is the runtime's own
    arithmetic, so a quantized build gets the bound of its I/O dtype (an intact int4
    package is ~1e-3 off, a few damaged scales ~1e-1). It is wider for float16
    activations, and for MatMulNBits with accuracy_level > 0, which rounds the
    activations to int8 (or float16) before multiplying, an error the reference
    does not model; and one float16 rounding at the end for a float16 output (the
    CPU profile's logits).
    """
    rounded_activations = rounds_activations(ir, weights)

    def tolerance(output: np.ndarray) -> float:
        if atol is not None:
            return atol
        if rounded_activations:
            return 1e-1
        if ir.precision.io_dtype != "float32":
            return 3e-2
        return 4e-3 if output.dtype == np.float16 else 1e-3

    return tolerance


class AsBuiltWeights:
    """The source's weights as a quantized build computes with them: each linear weight the plan
    quantizes goes through the same quantize -> dequantize, so the reference sees the package's rounding
    and only a wrong graph or a damaged weight is left to tell them apart."""

    def __init__(self, store, plan, table=()):
        # `table`: the IR's weight decisions (ModelIR.weights); when given, each weight is stored as it says.
        self._store, self._plan = store, plan
        self._table = {w.name: w for w in table}

    def names(self):
        return self._store.names()

    def info(self, name: str):
        return self._store.info(name)

    def read(self, name: str):
        return self.read_float(name)

    def read_float(self, name: str) -> np.ndarray:
        from ..ir import WeightRole
        from ..weights.quant import embedding_form, embedding_requested, materialize, resolve
        from ..weights import QuantizedTensor

        if self._table:
            decision = self._table.get(name)
            if decision is None or decision.form is None:
                return self._store.read_float(name)
            if decision.role is WeightRole.EXPERTS:
                from ..weights.quant import dequantize_experts

                return dequantize_experts(self._store.read(name), decision.form, self._store.info(name).shape)
            embedding = decision.role is WeightRole.EMBEDDING
            symmetric = self._plan.scheme_for(name).symmetric if embedding else not decision.form.has_zero_points
            return materialize(self._store.read(name), decision.form, symmetric=symmetric).dequantize()
        # Norms, conv kernels, gate vectors, and an embedding the plan stores float, are built as the source has them.
        info = self._store.info(name)
        if name.endswith("embed_tokens.weight"):
            requested = embedding_requested(self._plan, name)
            if embedding_form(info, self._plan.scheme_for(name), requested) is None:
                return self._store.read_float(name)
        elif len(info.shape) != 2:
            return self._store.read_float(name)
        weight = resolve(self._store.read(name), self._plan.scheme_for(name))
        return weight.dequantize() if isinstance(weight, QuantizedTensor) else np.asarray(weight, np.float32)

    def close(self) -> None:
        self._store.close()


def stores_quantized(ir, weights) -> bool:
    """Whether the package stores any weight quantized: one the plan quantizes, or a source-quantized one it keeps."""
    from ..weights.quant import resolved_form

    if ir.weights:
        return any(w.form is not None for w in ir.weights)
    return any(
        resolved_form(info, ir.quantization.scheme_for(name)) is not None
        for name in weights.names()
        if len((info := weights.info(name)).shape) == 2
    )


def rounds_activations(ir, weights) -> bool:
    """Whether a weight stored quantized has accuracy_level > 0: its MatMulNBits rounds the activations too."""
    from ..passes.quantization import profile_accuracy
    from ..weights.quant import resolved_form

    def accuracy_level(name: str) -> int:
        level = ir.quantization.scheme_for(name).accuracy_level
        return profile_accuracy(ir) if level is None else level

    from ..ir import WeightRole

    # QMoE's 8-bit CPU kernel quantizes activations to int8 at every accuracy level.
    if any(w.role is WeightRole.EXPERTS and w.form is not None and (w.form.bits == 8 or w.accuracy_level > 0)
           for w in ir.weights):
        return True
    return any(
        accuracy_level(name) > 0
        and resolved_form(info, ir.quantization.scheme_for(name)) is not None
        for name in weights.names()
        if len((info := weights.info(name)).shape) == 2
    )


def strict_greedy(ir, weights) -> bool:
    """float32 activations, rounded nowhere but in the weights the reference shares: greedy tokens must match it."""
    return ir.precision.io_dtype == "float32" and not rounds_activations(ir, weights)
