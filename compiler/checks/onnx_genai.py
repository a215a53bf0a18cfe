"""Contract checks of a package's onnx-genai files, as onnx-genai loads them (`mtpc.profiles.onnx_genai`).

onnx-genai picks its loader by the metadata: one with a `pipeline` goes to its pipeline loader (the
`workflow` layout, which mtpc wrote before learning that loader never reads the MTP sidecar's
declaration: still checked, with a warning when the package carries a sidecar), anything else to
`Engine::from_dir` (the `flat` layout mtpc writes), which checks here:

- the keys onnx-genai's metadata crate refuses on that route (a top-level `kv_cache`, `speculative`
  or `speculator_config`, `model.io.kv_update`) and capabilities its default runtime does not admit;
- the target graph as `resolve_model_path` finds it (`decoder.onnx`, else the root's only `.onnx`),
  and `model.io`'s ports in it;
- `config.json`'s `speculator_config` against both graphs (`onnx_genai_sidecar`).
"""

from __future__ import annotations

from typing import Iterator

from ..emit.inference_metadata import CONFIG_FILE as HF_CONFIG, METADATA_FILE as INFERENCE_METADATA
from ..profiles.onnx_genai import PROFILE, SHORT_COMMIT
from ..schema.validation import json_pointer
from .completeness import check_onnx_genai_files
from .graphs import Graph
from .onnx_genai_sidecar import check_speculator
from .package import Checker

# mtpc's schema for each metadata layout (the emitter declares the same on what it writes).
LAYOUT_SCHEMAS = {"flat": "inference_metadata.flat.schema.json", "workflow": "inference_metadata.workflow.schema.json"}

_ON_THIS_ROUTE = f"onnx-genai {SHORT_COMMIT} (Engine::from_dir, a package without a pipeline)"
# Keys the metadata crate refuses on the Engine::from_dir route, each refusing the whole file.
_REFUSED_KEYS = {
    ("kv_cache",): f"{_ON_THIS_ROUTE} has no top-level kv_cache: its metadata parser refuses the whole file",
    ("speculative",): (
        f"at onnx-genai {SHORT_COMMIT} `speculative` is a workflow's SpeculativeContract (proposer, target, ...) and needs "
        "a pipeline.workflow, so the metadata is refused; the MTP sidecar is declared in config.json (speculator_config)"
    ),
    ("speculator_config",): (
        f"{_ON_THIS_ROUTE} refuses this key and the whole file with it; the MTP sidecar is declared in config.json "
        "(speculator_config)"
    ),
    ("model", "io", "kv_update"): f"{_ON_THIS_ROUTE}'s model.io has no kv_update: its metadata parser refuses the whole file",
}


def metadata_layout(doc: dict) -> str:
    """onnx-genai's route: any `pipeline` sends the package to the pipeline loader (null is no pipeline)."""
    return "workflow" if doc.get("pipeline") is not None else "flat"


def check_onnx_genai(c: Checker) -> None:
    metadata = layout = None
    if INFERENCE_METADATA in c.files:
        metadata = c.parse(INFERENCE_METADATA)
        if isinstance(metadata, dict):
            layout = metadata_layout(metadata)
            c.validate(INFERENCE_METADATA, metadata, LAYOUT_SCHEMAS[layout])
        elif metadata is not None:
            c.add(INFERENCE_METADATA, "", "must be a mapping")
    speculator = None
    if HF_CONFIG in c.files:
        config = c.parse(HF_CONFIG)
        if isinstance(config, dict) and config.get("speculator_config") is not None:
            speculator = config["speculator_config"]
            c.validate(HF_CONFIG, config, "speculator_config.schema.json")

    target = None
    if layout == "workflow":
        target = check_workflow(c, INFERENCE_METADATA, metadata)
        if speculator is not None:
            c.add(INFERENCE_METADATA, json_pointer("pipeline"),
                  f"onnx-genai {SHORT_COMMIT} loads a package with a pipeline through its pipeline loader, which never reads "
                  f"{HF_CONFIG}'s speculator_config: this package decodes without its MTP head",
                  severity="warning", hint="recompile it with mtpc (targets.onnx_genai.layout: flat)")
    elif layout == "flat" or speculator is not None:
        target = engine_target(c, speculator)
        if layout == "flat":
            check_flat(c, INFERENCE_METADATA, metadata, target)
    if speculator is not None:
        check_speculator(c, HF_CONFIG, ["speculator_config"], speculator, target,
                         metadata if isinstance(metadata, dict) else None)
    check_onnx_genai_files(c, metadata, layout, speculator)


# ----------------------------------------------------------------------------- Engine::from_dir


def engine_target(c: Checker, speculator) -> Graph | None:
    """The target graph as onnx-genai's `resolve_model_path` finds it: decoder.onnx, else the root's only .onnx."""
    if PROFILE.decoder_graph in c.files:
        return c.graph(INFERENCE_METADATA, "", PROFILE.decoder_graph)
    root = sorted(rel for rel in c.files if "/" not in rel and rel.endswith(".onnx"))
    if len(root) == 1:
        return c.graph(INFERENCE_METADATA, "", root[0])
    rule = (f"onnx-genai's Engine::from_dir loads {PROFILE.decoder_graph}, else the package root's only .onnx file, "
            "and refuses a folder with several")
    if not root:
        c.add(INFERENCE_METADATA, "", f"has no target graph beside it: {rule}, and this package has neither")
        return None
    sidecar = speculator.get("model") if isinstance(speculator, dict) else None
    hint = f"put the MTP sidecar in a folder of its own (mtpc writes {PROFILE.sidecar_folder}/mtp_sidecar.onnx)"
    if sidecar in root:
        others = ", ".join(r for r in root if r != sidecar)
        c.add(HF_CONFIG, json_pointer("speculator_config", "model"), f"{sidecar!r} sits at the package root beside {others}: {rule}",
              hint=hint)
    else:
        c.add(INFERENCE_METADATA, "", f"the package root holds {len(root)} .onnx files ({', '.join(root)}) and no "
                                      f"{PROFILE.decoder_graph}: {rule}", hint=hint)
    # The other checks go on against the main decoder mtpc names model.onnx, so one mistake is one finding.
    return c.graph(INFERENCE_METADATA, "", "model.onnx") if "model.onnx" in root else None


def check_flat(c: Checker, rel: str, doc: dict, target: Graph | None) -> None:
    for path, why in _REFUSED_KEYS.items():
        parent = doc
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent:
            c.add(rel, json_pointer(*path), why)
    capabilities = doc.get("required_capabilities")
    for i, capability in enumerate(capabilities if isinstance(capabilities, list) else ()):
        if isinstance(capability, str) and capability not in PROFILE.runtime_capabilities:
            c.add(rel, json_pointer("required_capabilities", i),
                  f"{capability!r} is not a capability {_ON_THIS_ROUTE} admits: its default runtime has "
                  f"{', '.join(PROFILE.runtime_capabilities)}")
    io = (doc.get("model") or {}).get("io") if isinstance(doc.get("model"), dict) else None
    if target is None or not isinstance(io, dict):
        return
    # onnx-genai resolves every declared port against the graph and refuses the load on a missing one
    # (native_decode/load.rs:475-585, decode/resolved_io.rs:432-485); ong-check does not look.
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
                    name = pair.get(side) if isinstance(pair, dict) else None
                    if name and name not in present:
                        c.add(rel, json_pointer("model", "io", key, i, side), f"{name!r} is not an {side} of {target.relpath}")
                    elif side == "input" and name:
                        _zero_fillable(c, rel, json_pointer("model", "io", key, i, side), present[name], target.relpath)


def _zero_fillable(c: Checker, rel: str, where: str, state, graph: str) -> None:
    """onnx-genai zero-fills a state input of the graph's own shape, taking only its leading axis for batch, and
    refuses any other symbolic dim (decode/values.rs, concrete_fixed_state_shape, at ac9c7dd): a windowed state
    ([W, batch, ...]) is onnxruntime-genai's alone."""
    symbolic = [axis for axis, dim in enumerate(state.shape or ()) if axis > 0 and not isinstance(dim, int)]
    if symbolic:
        c.add(rel, where, f"{state.name!r} in {graph} has the symbolic dim {state.shape[symbolic[0]]!r} at axis "
                          f"{symbolic[0]}: onnx-genai zero-fills a state with only its leading axis taken for batch, "
                          "and refuses it", hint="a package with a state window gives onnx-genai its unwindowed main "
                                                 "graph as decoder.onnx (mtpc writes it)")


# ----------------------------------------------------------------------------- workflow (pipeline loader)


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
    workflow = doc["pipeline"].get("workflow") if isinstance(doc["pipeline"], dict) else None
    if not isinstance(workflow, dict):
        return None
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
        component = step.get("component")
        if component not in components:
            c.add(rel, json_pointer(*path, "component"), f"{component!r} is not a component of pipeline.workflow.components")
            continue
        g = graphs.get(component)
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
