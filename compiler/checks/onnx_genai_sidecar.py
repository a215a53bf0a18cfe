"""onnx-genai's MTP sidecar declaration (`config.json` -> `speculator_config`) against the graphs it names.

First the rules onnx-genai's reader applies to the block itself (`mtpc.emit.speculator.speculator_findings`,
shared with the emitter), each at the field to change; one that makes the block fail to deserialize is
flagged as such, because onnx-genai then drops the whole declaration without an error and loads the
model without speculation. Then the block against the graphs: the seed output, the head's inputs and
outputs, and the initializers it borrows from the target, as onnx-genai's native loader takes them.
"""

from __future__ import annotations

from ..emit.inference_metadata import METADATA_FILE as INFERENCE_METADATA
from ..emit.speculator import speculator_findings
from ..ir.contracts import quantized_companions
from ..schema.validation import json_pointer
from .genai_config import same_hidden
from .graphs import Graph, Tensor
from .package import Checker

DROPPED = ("onnx-genai cannot deserialize this speculator_config: its detect_speculator drops the whole block without "
           "an error, and the model loads without speculation")


def _vocab_size(metadata: dict | None) -> int | None:
    """The target's `model.vocab_size`, which native MTP reads (None when not declared as an integer)."""
    model = metadata.get("model") if metadata is not None else None
    vocab = model.get("vocab_size") if isinstance(model, dict) else None
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None


def check_speculator(c: Checker, file: str, base: list, spec, target: Graph | None, metadata: dict | None) -> None:
    """`metadata`: the parsed inference_metadata.yaml (None when absent or unreadable: its own finding)."""
    vocab_size = _vocab_size(metadata)
    for finding in speculator_findings(spec, target_vocab_size=vocab_size):
        if finding.in_metadata:
            if metadata is not None:
                c.add(INFERENCE_METADATA, json_pointer(*finding.field), finding.message)
        else:
            c.add(file, json_pointer(*base, *finding.field), finding.message, hint=DROPPED if finding.dropped else None)
    if not isinstance(spec, dict) or str(spec.get("proposal_type", "")).lower() != "mtp":
        return
    head = c.graph(file, json_pointer(*base, "model"), spec.get("model"))
    width = spec.get("target_hidden_size")
    if target is not None:
        seed_name = spec.get("target_hidden_output") or "hidden_states"
        seed = target.outputs.get(seed_name)
        if seed is None:
            c.add(file, json_pointer(*base, "target_hidden_output"), f"{seed_name!r} is not an output of {target.relpath}")
        else:
            layout = spec.get("target_hidden_layout") or "BSHC"  # onnx-genai's default
            rank = {"BSH": 3, "BSHC": 4}.get(layout)
            if rank is not None and seed.shape is not None and len(seed.shape) != rank:
                c.add(file, json_pointer(*base, "target_hidden_layout"), f"{layout} needs a rank-{rank} seed but {seed_name!r} in {target.relpath} has rank {len(seed.shape)}")
            if isinstance(width, int) and seed.width != width:
                c.add(file, json_pointer(*base, "target_hidden_size"), f"is {width!r} but {seed_name!r} in {target.relpath} is {seed.width!r} wide")
            if head is not None and "hidden_states" in head.inputs:
                same_hidden(c, file, json_pointer(*base, "target_hidden_output"), seed, target.relpath, head.inputs["hidden_states"], head.relpath)
        if not target.interface_only:  # what a graph holds is checked once it is built (compile)
            _check_borrowed(c, file, base, spec, target, vocab_size, width)
    if head is not None:
        for name in ("inputs_embeds", "hidden_states"):
            if name not in head.inputs:
                c.add(file, json_pointer(*base, "model"), f"{head.relpath} has no input {name!r}")
        out = spec.get("mtp_hidden_output") or "mtp_hidden"
        if out not in head.outputs:
            c.add(file, json_pointer(*base, "mtp_hidden_output"), f"{out!r} is not an output of {head.relpath}")
        embeds = head.inputs.get("inputs_embeds")
        if embeds is not None and isinstance(width, int) and embeds.width != width:
            c.add(file, json_pointer(*base, "target_hidden_size"), f"is {width!r} but {head.relpath} input 'inputs_embeds' is {embeds.width!r} wide")


# ----------------------------------------------------------------------------- borrowed initializers
#
# How onnx-genai's native loader takes the sidecar's `embedding` and `lm_head` from the target graph
# (`load_target_initializer_adapters` and `build_quantized_draft_lm_head`,
# crates/onnx-genai-engine/src/speculative/mod.rs at ac9c7dd0; reference §4.5):
# - embedding: exact initializer name, 2-D [vocab, target_hidden_size], float32/float16/bfloat16;
#   its rows are the vocabulary (a GatherBlockQuantized embedding does not qualify);
# - lm_head: dense 2-D float [H, vocab] or [vocab, H]; or, on the native backend only, a
#   MatMulNBits-packed 3-D [N, k_blocks, blob] with `<prefix>.scales` [N, k_blocks] (required) and
#   `<prefix>.zero_points` (optional) beside it, from which it derives block_size = H / k_blocks and
#   bits = blob * 8 / block_size and runs a MatMulNBits of its own; N must be the vocabulary.
# A package that breaks none of these loads. One rule is ours: the encoding onnx-genai derives must be
# the one the target's own MatMulNBits reads the weight with, or the drafts come from other logits.

_FLOAT_DTYPES = ("float32", "float16", "bfloat16")
_PACKED_BITS = (2, 4, 8)  # what onnx-genai's MatMulNBits kernels take


def _check_borrowed(c: Checker, file: str, base: list, spec: dict, target: Graph, vocab_size, width) -> None:
    names = {}
    for key in ("embedding", "lm_head"):
        ref = spec.get(key)
        name = ref.get("name") if isinstance(ref, dict) else None
        if isinstance(name, str) and name:
            names[key] = name
    vocab = vocab_size if isinstance(vocab_size, int) else None
    if "embedding" in names:
        rows = _check_embedding(c, file, json_pointer(*base, "embedding", "name"), names["embedding"], target, vocab, width)
        vocab = rows if rows is not None else vocab
    if "lm_head" in names:
        _check_lm_head(c, file, json_pointer(*base, "lm_head", "name"), names["lm_head"], target, vocab, width)


def _missing(target: Graph, name: str, instead: str) -> str:
    """`name` is not there; where a builder stored it quantized under another name, say so and what would do."""
    message = f"{name!r} is not an initializer of {target.relpath}"
    stored = sorted(n for n in target.initializers if n.startswith(name + "_Q"))
    return message + (f" (it is stored quantized, as {stored[0]!r}; {instead})" if stored else "")


def _check_embedding(c: Checker, file: str, where: str, name: str, target: Graph, vocab: int | None, width) -> int | None:
    """The embedding's row count (the vocabulary) when it qualifies, else None."""
    init = target.initializers.get(name)
    if init is None:
        c.add(file, where, _missing(target, name, "the sidecar borrows only a dense float embedding"))
        return None
    if not init.shape or len(init.shape) != 2:
        c.add(file, where, f"{name!r} must be a dense 2-D [vocab, hidden] tensor, is {init.shape}")
        return None
    rows, cols = init.shape
    ok = True
    if isinstance(width, int) and cols != width:
        c.add(file, where, f"{name!r} is {cols} wide but target_hidden_size is {width!r}")
        ok = False
    if init.dtype not in _FLOAT_DTYPES:
        c.add(file, where, f"{name!r} is {init.dtype}; the sidecar borrows a float32, float16 or bfloat16 embedding")
        ok = False
    if vocab is not None and rows != vocab:
        c.add(file, where, f"{name!r} has {rows} rows but model.vocab_size is {vocab}")
    return rows if ok else None


def _check_lm_head(c: Checker, file: str, where: str, name: str, target: Graph, vocab: int | None, width) -> None:
    init = target.initializers.get(name)
    if init is None:
        c.add(file, where, _missing(target, name, "onnx-genai borrows a packed LM head by its own name, with `<prefix>.scales`"))
        return
    shape = init.shape or ()
    if len(shape) == 2 and init.dtype in _FLOAT_DTYPES:
        if isinstance(width, int) and vocab is not None and tuple(shape) not in ((width, vocab), (vocab, width)):
            c.add(file, where, f"{name!r} is {list(shape)}; a dense LM head must be [{width}, {vocab}] or [{vocab}, {width}] (hidden, vocabulary)")
        return
    if len(shape) != 3 or init.dtype != "uint8":
        c.add(file, where, f"{name!r} ({init.dtype} {list(shape)}) is neither a dense float [hidden, vocab] / [vocab, hidden] "
                           "matrix nor a MatMulNBits-packed uint8 [N, k_blocks, blob] tensor")
        return
    _check_packed_lm_head(c, file, where, init, target, vocab, width)


def _check_packed_lm_head(c: Checker, file: str, where: str, init: Tensor, target: Graph, vocab: int | None, width) -> None:
    name = init.name
    n, k_blocks, blob = init.shape
    if not isinstance(width, int):
        return
    if not k_blocks or width % k_blocks:
        c.add(file, where, f"{name!r} has {k_blocks} blocks per row, which does not divide target_hidden_size {width}: "
                           "onnx-genai derives the block size from the two")
        return
    block_size = width // k_blocks
    bits = blob * 8 // block_size if blob * 8 % block_size == 0 else None
    if bits not in _PACKED_BITS:
        c.add(file, where, f"{name!r} packs {blob} bytes per block of {block_size} ({width} / {k_blocks} blocks), "
                           f"which is no {', '.join(map(str, _PACKED_BITS))}-bit encoding")
        return
    if vocab is not None and n != vocab:
        c.add(file, where, f"{name!r} has {n} rows but the vocabulary (the embedding's rows) is {vocab}")
    scales_name, zero_points_name = quantized_companions(name)
    scales = target.initializers.get(scales_name)
    if scales is None:
        c.add(file, where, f"{name!r} is packed, so onnx-genai takes its scales from {scales_name!r}, "
                           f"which is not an initializer of {target.relpath}")
    elif scales.dtype not in _FLOAT_DTYPES or tuple(scales.shape or ()) != (n, k_blocks):
        c.add(file, where, f"its scales {scales_name!r} are {scales.dtype} {list(scales.shape or ())}; onnx-genai needs "
                           f"float32, float16 or bfloat16 [{n}, {k_blocks}]")
    zero_points = target.initializers.get(zero_points_name)
    packed_points = (n, -(-k_blocks * bits // 8))
    if zero_points is not None and not (
        (zero_points.dtype == "uint8" and tuple(zero_points.shape or ()) == packed_points)
        or (scales is not None and zero_points.dtype == scales.dtype and tuple(zero_points.shape or ()) == (n, k_blocks))
    ):
        c.add(file, where, f"its zero points {zero_points_name!r} are {zero_points.dtype} {list(zero_points.shape or ())}; "
                           f"MatMulNBits takes uint8 {list(packed_points)} (or the scales' type and shape)")
    reader = target.packed_readers.get(name)
    if reader is None:
        return
    if (reader.bits, reader.block_size) != (bits, block_size):
        c.add(file, where, f"onnx-genai would read {name!r} as {bits}-bit blocks of {block_size} (from its shape and "
                           f"target_hidden_size), but {target.relpath} reads it as {reader.bits}-bit blocks of {reader.block_size}")
    wanted_points = zero_points_name if zero_points is not None else None
    if (reader.scales, reader.zero_points) != (scales_name, wanted_points):
        c.add(file, where, f"onnx-genai would pair {name!r} with scales {scales_name!r} and zero points {wanted_points!r}, "
                           f"but {target.relpath} reads it with {reader.scales!r} and {reader.zero_points!r}")
