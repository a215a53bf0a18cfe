"""Contract checks of onnxruntime-genai's `genai_config.json` files against the graphs they name.

Every tensor name a decoder or `mtp` section mentions exists in its graph (`%d` templates
expanded over the layers that have that state) and every graph input is fed; the head's
hidden-state input matches the main output it is fed from; a head folder's own config agrees
with the main one; `shared_initializers` point at bytes inside the package holding a
main-graph initializer of that dtype and shape; and nothing in them is a key or value the
release the package was made for (provenance.json) refuses, by that release's runtime profile.
"""

from __future__ import annotations

from ..emit.provenance_record import PROVENANCE_NAME as PROVENANCE
from ..ir import OrtGenaiTarget
from ..ir.contracts import PAGED_INPUT_NAMES
from ..profiles import ort_genai_profile, ort_genai_profiles
from ..profiles.ort_genai import OrtGenaiProfile
from ..schema.validation import json_pointer
from ..util.diagnostics import MtpcError
from .graphs import Graph, Tensor
from .package import Checker, byte_count, folder
from .state_window import check_state_window


# Roles whose names repeat per layer ("%d"), by the kind of layer that has them.
_RECURRENT_MARKERS = ("conv", "recurrent")
# Paged-attention inputs a projected MTP head inherits from the main decoder: ours, and the windowed
# block table of sliding-window models (which mtpc never emits, but a package may carry).
_PAGED_INPUTS = (*PAGED_INPUT_NAMES, "block_table_windowed")
# Inputs onnxruntime-genai feeds under these names when the config does not rename them.
_DEFAULT_INPUTS = {
    "input_ids": "input_ids",
    "inputs_embeds": "inputs_embeds",
    "attention_mask": "attention_mask",
    "position_ids": "position_ids",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
    "past_conv_names": "past_key_values.%d.conv_state",
    "past_recurrent_names": "past_key_values.%d.recurrent_state",
    **{name: name for name in _PAGED_INPUTS},
}


def _stateless_layer(graph: Graph, layer: int) -> bool:
    """A layer that keeps no state (Nemotron-H's MoE layers), as the graph shows it: it holds that layer's weights
    (`model.layers.{i}.*`). A graph known by its interface alone cannot show it, and is given the benefit."""
    marker = f"layers.{layer}."
    return graph.interface_only or any(marker in name for name in graph.initializers)


def _layer_family(role: str) -> str:
    return "recurrent" if any(m in role for m in _RECURRENT_MARKERS) else "attention"


def _layer_families(decoder: dict, graph: Graph, num_layers: int, templates: dict[str, str]) -> list[set[str]]:
    """Which state families ("attention", "recurrent") each layer has.

    Taken from `layer_types` or `state_groups` when the config states it; the
    Qwen3.5 builder writes neither, so otherwise a layer has a family when the
    graph holds any of that family's names for it. A renamed tensor is then
    still caught, by its missing partner names.
    """
    families: list[set[str]] = [set() for _ in range(num_layers)]
    kinds = decoder.get("layer_types")
    groups = decoder.get("state_groups")
    if isinstance(kinds, list) and len(kinds) == num_layers:
        for i, kind in enumerate(kinds):
            families[i].add("recurrent" if kind == "linear_attention" else "attention")
        return families
    if isinstance(groups, list) and groups:
        for group in groups:
            if not isinstance(group, dict):
                continue
            family = "attention" if group.get("kind") == "paged_kv" else "recurrent"
            for i in group.get("layer_ids") or []:
                if isinstance(i, int) and 0 <= i < num_layers:
                    families[i].add(family)
        return families
    names = set(graph.inputs) | set(graph.outputs)
    for role, template in templates.items():
        for i in range(num_layers):
            if template.replace("%d", str(i)) in names:
                families[i].add(_layer_family(role))
    return families


def _check_io_names(
    c: Checker, file: str, base: list, decoder: dict, graph: Graph, num_layers: int, inherited: dict[str, str] | None = None
) -> None:
    """Every name in `decoder.inputs` / `.outputs` exists in the graph; every graph input is fed.

    `inherited` maps input roles the runtime takes from another section (a
    projected MTP head's mask and paged inputs come from the main decoder) to
    the names it feeds; those roles are not read from this section.
    """
    inherited = inherited or {}
    sections = {"inputs": graph.inputs, "outputs": graph.outputs}
    templates: dict[str, str] = {}
    for section in sections:
        names = decoder.get(section)
        if isinstance(names, dict):
            templates.update({r: n for r, n in names.items() if isinstance(n, str) and "%d" in n})
    families = _layer_families(decoder, graph, num_layers, templates)
    fed: set[str] = set()
    for section, present in sections.items():
        names = decoder.get(section)
        if not isinstance(names, dict):
            continue
        kind = "input" if section == "inputs" else "output"
        for role, name in sorted(names.items()):
            if not isinstance(name, str) or not name or (section == "inputs" and role in inherited):
                continue  # an empty name means "not present"
            where = json_pointer(*base, section, role)
            if "%d" in name:
                wanted = [name.replace("%d", str(i)) for i in range(num_layers) if _layer_family(role) in families[i]]
            else:
                wanted = [name]
            for tensor in wanted:
                if tensor not in present:
                    c.add(file, where, f"{tensor!r} is not an {kind} of {graph.relpath}")
            fed.update(wanted)
    for i, fams in enumerate(families):
        if not fams and templates and not _stateless_layer(graph, i):
            c.add(file, json_pointer(*base), f"layer {i} has no state tensors in {graph.relpath} (num_hidden_layers is {num_layers})")
    configured_inputs = decoder.get("inputs") if isinstance(decoder.get("inputs"), dict) else {}
    defaults = {role: name for role, name in _DEFAULT_INPUTS.items() if role not in configured_inputs}
    defaults.update(inherited)
    for role, name in defaults.items():
        if "%d" in name:
            fed.update(name.replace("%d", str(i)) for i in range(num_layers) if _layer_family(role) in families[i])
        else:
            fed.add(name)
    for name in sorted(set(graph.inputs) - fed):
        c.add(file, json_pointer(*base, "inputs"), f"{graph.relpath} input {name!r} is not named here, so the runtime never feeds it")


def _num_layers(c: Checker, file: str, where: str, value, default: int | None = None) -> int | None:
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        c.add(file, where, "must be a positive integer")
        return None
    return value


def same_hidden(c: Checker, file: str, where: str, main: Tensor, main_graph: str, head: Tensor, head_graph: str) -> None:
    what = f"main output {main.name!r} ({main_graph}) and head input {head.name!r} ({head_graph})"
    if main.dtype != head.dtype:
        c.add(file, where, f"{what} differ in dtype: {main.dtype} vs {head.dtype}")
    if main.shape is not None and head.shape is not None:
        if len(main.shape) != len(head.shape):
            c.add(file, where, f"{what} differ in rank: {len(main.shape)} vs {len(head.shape)} (dense vs packed layout)")
        if main.width != head.width:
            c.add(file, where, f"{what} differ in width (last dim): {main.width} vs {head.width}")


def check_genai_config(c: Checker, rel: str, cfg: dict) -> tuple[Graph | None, Graph | None]:
    """Returns (main graph, head graph) for cross-config checks."""
    base = folder(rel)
    model = cfg.get("model")
    if not isinstance(model, dict):
        return None, None
    decoder = model.get("decoder")
    main = head = None
    if isinstance(decoder, dict):
        main = c.graph(rel, json_pointer("model", "decoder", "filename"), decoder.get("filename"), base)
        layers = _num_layers(c, rel, json_pointer("model", "decoder", "num_hidden_layers"), decoder.get("num_hidden_layers"))
        if main is not None and layers is not None:
            _check_io_names(c, rel, ["model", "decoder"], decoder, main, layers)
            check_state_window(c, rel, cfg, decoder, main, state_names(decoder, layers))
            hidden = decoder.get("outputs", {}).get("hidden_states") if isinstance(decoder.get("outputs"), dict) else None
            width = decoder.get("hidden_size")
            for name in filter(None, [hidden, (decoder.get("inputs") or {}).get("hidden_states")]):
                t = main.outputs.get(name) or main.inputs.get(name)
                if t is not None and isinstance(t.width, int) and isinstance(width, int) and t.width != width:
                    c.add(rel, json_pointer("model", "decoder", "hidden_size"), f"is {width} but {name!r} in {main.relpath} is {t.width} wide")
    mtp = model.get("mtp")
    if isinstance(mtp, dict) and mtp.get("filename"):
        head = c.graph(rel, json_pointer("model", "mtp", "filename"), mtp.get("filename"), base)
        layers = _num_layers(c, rel, json_pointer("model", "mtp", "num_hidden_layers"), mtp.get("num_hidden_layers"), 1)
        if head is not None and layers is not None:
            # The projection never reads mtp.inputs.attention_mask: the head gets the main decoder's mask and
            # paged inputs under the main decoder's names (a paged head has no mask at all).
            main_inputs = decoder.get("inputs") if isinstance(decoder, dict) and isinstance(decoder.get("inputs"), dict) else {}
            inherited = {role: main_inputs.get(role, role) for role in ("attention_mask", *_PAGED_INPUTS)}
            _check_io_names(c, rel, ["model", "mtp"], mtp, head, layers, inherited)
            if main is not None:
                _check_mtp_against_main(c, rel, decoder, mtp, main, head)
    return main, head


def state_names(decoder: dict, num_layers: int) -> dict[str, list[str]]:
    """The conv / recurrent past and present tensor names per layer (one entry per layer, in order)."""
    out: dict[str, list[str]] = {}
    for section, prefix in (("inputs", "past"), ("outputs", "present")):
        names = decoder.get(section) if isinstance(decoder.get(section), dict) else {}
        for kind in ("conv", "recurrent"):
            role = f"{prefix}_{kind}_names"
            template = names.get(role, _DEFAULT_INPUTS.get(role))
            if isinstance(template, str) and "%d" in template:
                out[role] = [template.replace("%d", str(i)) for i in range(num_layers)]
    return out


def _check_mtp_against_main(c: Checker, rel: str, decoder: dict, mtp: dict, main: Graph, head: Graph) -> None:
    main_name = mtp.get("main_hidden_states", "hidden_states")
    head_inputs = mtp.get("inputs") if isinstance(mtp.get("inputs"), dict) else {}
    head_outputs = mtp.get("outputs") if isinstance(mtp.get("outputs"), dict) else {}
    head_name = head_inputs.get("hidden_states", "hidden_states")
    where = json_pointer("model", "mtp", "main_hidden_states")
    main_t = main.outputs.get(main_name)
    if main_t is None:
        c.add(rel, where, f"{main_name!r} is not an output of {main.relpath}")
    decoder_hidden = (decoder.get("outputs") or {}).get("hidden_states") if isinstance(decoder.get("outputs"), dict) else None
    if decoder_hidden and decoder_hidden != main_name:
        c.add(rel, where, f"{main_name!r} differs from model.decoder.outputs.hidden_states {decoder_hidden!r}")
    head_t = head.inputs.get(head_name)
    if main_t is not None and head_t is not None:
        same_hidden(c, rel, where, main_t, main.relpath, head_t, head.relpath)
    out_name = head_outputs.get("hidden_states", "hidden_states_out")
    if out_name == head_name:
        c.add(rel, json_pointer("model", "mtp", "outputs", "hidden_states"), f"{out_name!r} must differ from the head's hidden-state input")
    for role in _PAGED_INPUTS:
        name = (decoder.get("inputs") or {}).get(role, role) if isinstance(decoder.get("inputs"), dict) else role
        if name in main.inputs and name not in head.inputs:
            c.add(rel, json_pointer("model", "mtp", "filename"), f"{main.relpath} is paged (input {name!r}) but {head.relpath} lacks that input; the head inherits the main decoder's paged inputs")


def check_head_folder(c: Checker, rel: str, cfg: dict, root_rel: str, root_cfg: dict, main: Graph | None) -> None:
    """A head's own folder (for og.MtpGenerator) must agree with the main config it pairs with."""
    model, root_model = cfg.get("model") or {}, root_cfg.get("model") or {}
    for key in ("type", "vocab_size"):
        if key in root_model and model.get(key) != root_model.get(key):
            c.add(rel, json_pointer("model", key), f"is {model.get(key)!r} but {root_rel} has {root_model.get(key)!r}")
    dec, root_dec = model.get("decoder") or {}, root_model.get("decoder") or {}
    if dec.get("hidden_size") != root_dec.get("hidden_size"):
        c.add(rel, json_pointer("model", "decoder", "hidden_size"), f"is {dec.get('hidden_size')!r} but {root_rel} has {root_dec.get('hidden_size')!r}")
    head_input = (dec.get("inputs") or {}).get("hidden_states")
    if not head_input:
        c.add(rel, json_pointer("model", "decoder", "inputs", "hidden_states"), "must name the head's hidden-state input (og.MtpGenerator feeds it only when set)")
        return
    head_graph = c.graph(rel, json_pointer("model", "decoder", "filename"), dec.get("filename"), folder(rel))
    main_name = (root_model.get("mtp") or {}).get("main_hidden_states", "hidden_states")
    if main is not None and head_graph is not None and main_name in main.outputs and head_input in head_graph.inputs:
        same_hidden(c, rel, json_pointer("model", "decoder", "inputs", "hidden_states"), main.outputs[main_name], main.relpath, head_graph.inputs[head_input], head_graph.relpath)


def check_shared_initializers(c: Checker, rel: str, cfg: dict, main: Graph | None) -> None:
    """`shared_initializers`: each entry points at bytes inside the package that hold a main-graph initializer.

    The builder writes the same list for the decoder and the head (one set of
    weights, shared), so two lists in one config must be identical.
    """
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    lists = {}
    for section in ("decoder", "mtp"):
        entries = model.get(section, {}).get("shared_initializers") if isinstance(model.get(section), dict) else None
        if not isinstance(entries, list):
            continue
        lists[section] = entries
        for i, entry in enumerate(entries):
            if isinstance(entry, dict):
                _check_shared_entry(c, rel, ["model", section, "shared_initializers", i], entry, main)
    if len(lists) == 2 and lists["decoder"] != lists["mtp"]:
        c.add(rel, json_pointer("model", "mtp", "shared_initializers"), "differs from model.decoder.shared_initializers; the builder shares one set of weights, so the lists must be identical")


def _check_shared_entry(c: Checker, rel: str, base: list, entry: dict, main: Graph | None) -> None:
    data_file = entry.get("data_file")
    data = c.resolve(rel, json_pointer(*base, "data_file"), data_file, folder(rel), parent_ok=True) if isinstance(data_file, str) and data_file else None
    offset, length = entry.get("offset"), entry.get("length")
    # Malformed offsets / lengths are the schema's findings; only well-formed ones are measured.
    start = byte_count(offset, None) if isinstance(offset, str) else None
    count = byte_count(length, None) if isinstance(length, str) else None
    size = c.files[data].size() if data is not None else None
    if size is not None and start is not None and count is not None and start + count > size:
        c.add(rel, json_pointer(*base), f"offset {start} + length {count} ends at byte {start + count}, past the end of {data} ({size} bytes)")
    name = entry.get("name")
    if main is None or main.interface_only or not isinstance(name, str) or not name:
        return
    init = main.initializers.get(name)
    if init is None:
        c.add(rel, json_pointer(*base, "name"), f"{name!r} is not an initializer of {main.relpath}")
        return
    data_type = entry.get("data_type")
    if isinstance(data_type, int) and data_type != main.initializer_types.get(name):
        actual = main.initializer_types.get(name)
        c.add(rel, json_pointer(*base, "data_type"), f"is {data_type} ({_type_name(data_type)}) but {name!r} in {main.relpath} is {actual} ({_type_name(actual)})")
    shape = entry.get("shape")
    if isinstance(shape, list) and tuple(shape) != init.shape:
        c.add(rel, json_pointer(*base, "shape"), f"is {shape} but {name!r} in {main.relpath} is {list(init.shape or ())}")


def _type_name(data_type: int | None) -> str:
    try:
        from onnx import TensorProto

        return TensorProto.DataType.Name(data_type)
    except (ValueError, TypeError):
        return "unknown"



def runtime_profile(c: Checker, provenance) -> OrtGenaiProfile | None:
    """The onnxruntime-genai release a package was made for: the one its provenance.json names,
    else (packages from before mtpc recorded it) the default target's. None, with a finding, for a
    release mtpc has no profile of."""
    recorded = None
    if isinstance(provenance, dict):
        ort = (provenance.get("runtime_profiles") or {}).get("onnxruntime_genai")
        recorded = ort.get("version") if isinstance(ort, dict) else None
    if not isinstance(recorded, str):
        return ort_genai_profile(OrtGenaiTarget().version)
    try:
        return ort_genai_profile(recorded)
    except MtpcError:
        known = ", ".join(p.version for p in ort_genai_profiles())
        c.add(PROVENANCE, json_pointer("runtime_profiles", "onnxruntime_genai", "version"),
              f"the package is for onnxruntime-genai {recorded}, which mtpc has no profile of (it knows {known}), "
              "so its genai_config.json cannot be checked against what that release accepts")
        return None


def check_runtime_keys(c: Checker, rel: str, cfg: dict, profile: OrtGenaiProfile) -> None:
    """Every key or value `profile`'s release would refuse in `cfg`, where the schema has not said so already."""
    said = {(f.file, f.pointer) for f in c.findings}
    for at, _, message in profile.refusals(cfg):
        where = json_pointer(*at)
        if (rel, where) not in said:
            c.add(rel, where, message)
