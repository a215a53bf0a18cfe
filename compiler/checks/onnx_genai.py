"""Contract checks of onnx-genai's `inference_metadata.yaml` and the MTP sidecar block.

The metadata's port and state names exist in the graphs its components name; the sidecar
block (`speculator_config` in config.json, or a flat layout's `speculative:`) gets the rules
onnx-genai's reader applies (`mtpc.emit.speculator.speculator_findings`, shared with the
emitter), then is checked against the graphs: the seed output, the head's inputs and outputs,
and the initializers it borrows from the target, as onnx-genai's native loader takes them.
"""

from __future__ import annotations

from typing import Iterator

from ..ir.contracts import quantized_companions
from ..emit.speculator import speculator_findings
from ..schema.validation import json_pointer
from .genai_config import same_hidden
from .graphs import Graph, Tensor
from .package import Checker


def metadata_layout(doc: dict) -> str:
    pipeline = doc.get("pipeline")
    return "workflow" if isinstance(pipeline, dict) and "workflow" in pipeline else "flat"



def _walk_invokes(steps) -> Iterator[tuple[list, dict]]:
    """Every `invoke` step, however deeply nested in loops / branches / sequences, with its path."""

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("kind") == "invoke":
                yield path, node
            for k in sorted(node, key=str):
                yield from walk(node[k], path + [k])
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, path + [i])

    yield from walk(steps, ["pipeline", "workflow", "steps"])


def check_workflow(c: Checker, rel: str, doc: dict) -> Graph | None:
    workflow = doc["pipeline"]["workflow"]
    components = workflow.get("components") if isinstance(workflow.get("components"), dict) else {}
    graphs: dict[str, Graph] = {}
    for name, comp in sorted(components.items()):
        impl = comp.get("implementation") if isinstance(comp, dict) else None
        if isinstance(impl, dict) and impl.get("kind") == "onnx":
            g = c.graph(rel, json_pointer("pipeline", "workflow", "components", name, "implementation", "artifact"), impl.get("artifact"))
            if g is not None:
                graphs[name] = g
                roles = (comp.get("ports") or {}).get("roles") or {}
                for port in sorted(roles):
                    if port not in g.inputs and port not in g.outputs:
                        c.add(rel, json_pointer("pipeline", "workflow", "components", name, "ports", "roles", port), f"{port!r} is not an input or output of {g.relpath}")
    for path, step in _walk_invokes(workflow.get("steps")):
        g = graphs.get(step.get("component"))
        if g is None:
            continue
        for section, present, kind in (("inputs", g.inputs, "input"), ("outputs", g.outputs, "output")):
            for port in sorted(step.get(section) or {}):
                if port not in present:
                    c.add(rel, json_pointer(*path, section, port), f"{port!r} is not an {kind} of {g.relpath}")
    groups = (((workflow.get("serving") or {}).get("state_service") or {}).get("groups")) or {}
    for group_name, group in sorted(groups.items()):
        for comp_name, cells in sorted(((group or {}).get("ports") or {}).items()):
            g = graphs.get(comp_name)
            if g is None:
                continue
            for cell, port in sorted((cells or {}).items()):
                for key, present, kind in (("input", g.inputs, "input"), ("output", g.outputs, "output")):
                    name = (port or {}).get(key)
                    if name and name not in present:
                        where = json_pointer("pipeline", "workflow", "serving", "state_service", "groups", group_name, "ports", comp_name, cell, key)
                        c.add(rel, where, f"{name!r} is not an {kind} of {g.relpath}")
    # The decoder is the component that takes tokens (or embeddings), else the one whose artifact is
    # model.onnx; the sidecar borrows its weights. Chosen by what the metadata says, never by which
    # graphs happen to be readable: an unreadable decoder is its own finding, not a reason to check
    # the sidecar against itself.
    def takes_tokens(comp) -> bool:
        roles = ((comp or {}).get("ports") or {}).get("roles") if isinstance(comp, dict) else None
        return isinstance(roles, dict) and bool({"token_ids", "inputs_embeds"} & set(roles.values()))

    def artifact(comp) -> object:
        impl = comp.get("implementation") if isinstance(comp, dict) else None
        return impl.get("artifact") if isinstance(impl, dict) else None

    decoder = next((n for n in sorted(components) if takes_tokens(components[n])), None)
    if decoder is None:
        decoder = next((n for n in sorted(components) if artifact(components[n]) == "model.onnx"), None)
    return graphs.get(decoder) if decoder is not None else None


def check_flat(c: Checker, rel: str, doc: dict) -> Graph | None:
    target = c.graph(rel, "", "model.onnx") if "model.onnx" in c.files else None
    io = (doc.get("model") or {}).get("io")
    if target is None or not isinstance(io, dict):
        return target
    for key, value in sorted(io.items()):
        if key.endswith("_input") and isinstance(value, str):
            if value not in target.inputs:
                c.add(rel, json_pointer("model", "io", key), f"{value!r} is not an input of {target.relpath}")
        elif key.endswith("_output") and isinstance(value, str):
            if value not in target.outputs:
                c.add(rel, json_pointer("model", "io", key), f"{value!r} is not an output of {target.relpath}")
        elif key in ("kv_inputs", "kv_outputs") and isinstance(value, list):
            present = target.inputs if key == "kv_inputs" else target.outputs
            for i, name in enumerate(value):
                if name not in present:
                    c.add(rel, json_pointer("model", "io", key, i), f"{name!r} is not an {key[3:-1]} of {target.relpath}")
        elif key == "state_pairs" and isinstance(value, list):
            for i, pair in enumerate(value):
                for side, present in (("input", target.inputs), ("output", target.outputs)):
                    name = (pair or {}).get(side)
                    if name and name not in present:
                        c.add(rel, json_pointer("model", "io", key, i, side), f"{name!r} is not an {side} of {target.relpath}")
    return target


def check_speculator(c: Checker, file: str, base: list, spec: dict, target: Graph | None, vocab_size) -> None:
    """The MTP sidecar: onnx-genai's rules for the block itself, then the block against the graphs it names."""
    for message in speculator_findings(spec, target_vocab_size=vocab_size):
        c.add(file, json_pointer(*base), message)
    if str(spec.get("proposal_type", "")).lower() != "mtp":
        return
    head = c.graph(file, json_pointer(*base, "model"), spec.get("model"))
    width = spec.get("target_hidden_size")
    if target is not None:
        seed_name = spec.get("target_hidden_output", "hidden_states")
        seed = target.outputs.get(seed_name)
        if seed is None:
            c.add(file, json_pointer(*base, "target_hidden_output"), f"{seed_name!r} is not an output of {target.relpath}")
        else:
            layout = spec.get("target_hidden_layout", "BSHC")  # onnx-genai's default
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
        out = spec.get("mtp_hidden_output", "mtp_hidden")
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
