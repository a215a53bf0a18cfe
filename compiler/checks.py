"""Cross-artifact contract checks over a package directory (`mtpc check DIR`).

A schema says whether one file is well formed; these checks say whether the
files of a package agree with each other and with their ONNX graphs: every
tensor name a config mentions exists in the graph it names, the MTP head's
hidden-state input matches the main model's output (dtype, width, rank), the
initializers a sidecar borrows exist in the target graph, and every file a
config points at is a relative path inside the package, and every external-data
file a graph points at is long enough to hold the tensors it is said to hold.
The onnx-genai MTP sidecar block also gets the rules onnx-genai's reader applies
(`mtpc.emit.speculator.speculator_findings`, shared with the emitter).

Every check runs and every finding is collected before anything is reported,
so one run shows everything that is wrong. Graphs are read without their
external data: only names, dtypes and shapes are needed, and a data file is
measured by its size, never read.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

import numpy as np
import onnx
import yaml
from onnx import TensorProto

from .emit.genai_config import CONFIG_NAME as GENAI_CONFIG
from .emit.inference_metadata import CONFIG_FILE as HF_CONFIG, METADATA_FILE as INFERENCE_METADATA
from .contracts import PAGED_INPUT_NAMES
from .emit.speculator import speculator_findings
from .validation import errors as schema_errors, json_pointer


@dataclass(frozen=True, order=True)
class Finding:
    file: str  # package-relative, "/"-separated
    pointer: str  # RFC 6901 JSON pointer inside `file` ("" when about the whole file)
    message: str

    def render(self) -> str:
        return f"{self.file}:{self.pointer or '/'}: {self.message}"

    def to_json(self) -> dict:
        return {"file": self.file, "path": self.pointer or "/", "message": self.message}


# ----------------------------------------------------------------------------- graphs


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # numpy-style name ("float32", "int64", ...)
    shape: tuple[int | str | None, ...] | None  # None: rank unknown

    @property
    def width(self) -> int | str | None:
        return self.shape[-1] if self.shape else None


@dataclass(frozen=True)
class ExternalTensor:
    """An initializer whose bytes live in a data file, as the graph describes them."""

    name: str
    location: str | None
    offset: str | None  # the raw external_data values; malformed ones are findings
    length: str | None
    nbytes: int | None  # what its dims and type need (the runtime's length when none is given); None: not fixed


@dataclass
class Graph:
    relpath: str
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    initializers: dict[str, Tensor]
    external: tuple[ExternalTensor, ...]
    initializer_types: dict[str, int] = field(default_factory=dict)  # name -> onnx TensorProto data type


# Types packed several to a byte; the others take whole bytes (numpy's itemsize).
_PACKED_BITS = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.INT2: 2, TensorProto.UINT2: 2}
_UNSIZED = {TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2}


def _stored_bytes(init: onnx.TensorProto) -> int | None:
    """Bytes the initializer's dims and type take in a data file; None where that is not fixed."""
    if init.data_type in _UNSIZED:
        return None
    bits = _PACKED_BITS.get(init.data_type)
    if bits is None:
        try:
            bits = 8 * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
        except (KeyError, TypeError, ValueError):  # a type this onnx does not know
            return None
    return -(-math.prod(init.dims) * bits // 8)


def _tensor_from_value_info(vi: onnx.ValueInfoProto) -> Tensor:
    t = vi.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "undefined"
    shape = None
    if t.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return Tensor(vi.name, dtype, shape)


def _read_graph(data: bytes, relpath: str) -> Graph:
    model = onnx.load_model_from_string(data)
    g = model.graph
    initializers = {}
    external = []
    for init in g.initializer:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name if init.data_type else "undefined"
        initializers[init.name] = Tensor(init.name, dtype, tuple(init.dims))
        if init.data_location == onnx.TensorProto.EXTERNAL:
            entries = {entry.key: entry.value for entry in init.external_data}
            external.append(
                ExternalTensor(init.name, entries.get("location"), entries.get("offset"), entries.get("length"), _stored_bytes(init))
            )
    # Graph inputs that are also initializers are constants with a default, not runtime inputs.
    inputs = {vi.name: _tensor_from_value_info(vi) for vi in g.input if vi.name not in initializers}
    outputs = {vi.name: _tensor_from_value_info(vi) for vi in g.output}
    types = {init.name: init.data_type for init in g.initializer}
    return Graph(relpath, inputs, outputs, initializers, tuple(external), types)


# ----------------------------------------------------------------------------- the checker


def _folder(relpath: str) -> str:
    """The package-relative folder of a file ("" at the root): what its own file references are relative to."""
    parent = str(PurePosixPath(relpath).parent)
    return "" if parent == "." else parent


@dataclass(frozen=True)
class PackageFile:
    read: Callable[[], bytes]
    size: Callable[[], int | None]  # None: not known without producing the bytes


Files = dict[str, PackageFile]


def package_directory(root: str | Path) -> Files:
    root = Path(root)
    return {
        p.relative_to(root).as_posix(): PackageFile(p.read_bytes, lambda p=p: p.stat().st_size)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def artifact_files(artifacts) -> Files:
    """An in-memory package (the driver's artifacts) in the shape `check_files` reads.

    A streamed artifact (a weights file) has no size until it is produced; mtpc
    streams it whole, so there is nothing to measure it against.
    """
    return {a.relpath: PackageFile(a.read, lambda a=a: len(a.content) if a.content is not None else None) for a in artifacts}


@dataclass
class _Checker:
    files: Files
    findings: list[Finding] = field(default_factory=list)
    _graphs: dict[str, Graph | None] = field(default_factory=dict)
    # Schema `not` findings, kept back until the end: where a check of mtpc's own says the same
    # thing at the same place (a path with '..'), only its clearer line is reported.
    _negated: list[Finding] = field(default_factory=list)

    def add(self, file: str, where: str, message: str) -> None:
        self.findings.append(Finding(file, where, message))

    # -- files

    def resolve(self, file: str, where: str, ref: object, base: str = "", parent_ok: bool = False) -> str | None:
        """Package-relative path of a file a config names, or None (with a finding) if it is not usable.

        `parent_ok`: '..' may step out of `base` as long as the path stays inside the package.
        """
        if not isinstance(ref, str) or not ref:
            self.add(file, where, "must name a file")
            return None
        p = PurePosixPath(ref.replace("\\", "/"))
        if p.is_absolute() or re.match(r"^[A-Za-z]:", ref) or ref.startswith(("\\\\", "//")):
            self.add(file, where, f"{ref!r} must be a relative path")
            return None
        if ".." in p.parts and not parent_ok:
            self.add(file, where, f"{ref!r} must not contain '..'")
            return None
        rel = posixpath.normpath(str(PurePosixPath(base) / p) if base else str(p))
        if rel == ".." or rel.startswith("../"):
            self.add(file, where, f"{ref!r} points outside the package")
            return None
        if rel not in self.files:
            self.add(file, where, f"{ref!r} does not exist in the package")
            return None
        return rel

    def graph(self, file: str, where: str, ref: object, base: str = "") -> Graph | None:
        rel = self.resolve(file, where, ref, base)
        if rel is None:
            return None
        if rel not in self._graphs:
            try:
                graph = _read_graph(self.files[rel].read(), rel)
            except Exception as exc:  # a corrupt graph is a finding about the package, not a crash
                self.add(rel, "", f"cannot be read as an ONNX model: {exc}")
                graph = None
            else:
                self.external_data(graph)
            self._graphs[rel] = graph
        return self._graphs[rel]

    def external_data(self, graph: Graph) -> None:
        """Each data file a graph names exists in the package and is long enough for what it holds there."""
        by_location: dict[str, list[ExternalTensor]] = {}
        for tensor in graph.external:
            if tensor.location:
                by_location.setdefault(tensor.location, []).append(tensor)
            else:
                self.add(graph.relpath, "", f"initializer {tensor.name!r} is stored externally but names no location")
        for location, tensors in sorted(by_location.items()):
            data = self.resolve(graph.relpath, "", location, _folder(graph.relpath))
            size = self.files[data].size() if data is not None else None
            if size is not None:
                self.extents(graph.relpath, data, tensors, size)

    def extents(self, graph: str, data: str, tensors: list[ExternalTensor], size: int) -> None:
        """One finding per graph and data file: the initializer that ends furthest past the end, and how many do."""
        past_the_end = []
        for t in tensors:
            offset = _byte_count(t.offset, 0)
            length = _byte_count(t.length, t.nbytes)
            for key, raw, value in (("offset", t.offset, offset), ("length", t.length, length)):
                if value is None and raw is not None:
                    self.add(graph, "", f"initializer {t.name!r}: external-data {key} {raw!r} is not a byte count")
            if offset is not None and offset + (length or 0) > size:
                past_the_end.append((offset + (length or 0), t.name))
        if past_the_end:
            end, name = max(past_the_end)
            also = f"; {len(past_the_end)} of the {len(tensors)} {graph} initializers in it run past the end" if len(past_the_end) > 1 else ""
            self.add(data, "", f"{graph} initializer {name!r} ends at byte {end}, the file has {size} bytes (truncated?){also}")

    def parse(self, rel: str):
        try:
            text = self.files[rel].read().decode("utf-8")
            return json.loads(text) if rel.endswith(".json") else yaml.safe_load(text)
        except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
            self.add(rel, "", f"cannot be parsed: {exc}".replace("\n", " "))
            return None

    def validate(self, rel: str, instance, schema: str | None) -> None:
        if schema is None:
            self.add(rel, "", "no schema in mtpc covers this layout")
            return
        for e in schema_errors(schema, instance):
            finding = Finding(rel, json_pointer(*e.absolute_path), f"{_schema_message(e)} (schema {schema})")
            (self._negated if e.validator == "not" else self.findings).append(finding)

    def result(self) -> list[Finding]:
        said = {(f.file, f.pointer) for f in self.findings}
        return sorted(set(self.findings) | {f for f in self._negated if (f.file, f.pointer) not in said})


def _schema_message(error) -> str:
    """jsonschema's message, except that a `not` whose schema says what is wanted says that instead of dumping it."""
    wanted = error.schema.get("description") if error.validator == "not" and isinstance(error.schema, dict) else None
    return f"{error.instance!r} must be {wanted}" if wanted else error.message


def _byte_count(raw: str | None, default: int | None) -> int | None:
    """An external_data offset / length ("123"); `default` when absent, None when malformed."""
    if raw is None:
        return default
    return int(raw) if raw.isascii() and raw.isdigit() else None


# ----------------------------------------------------------------------------- genai_config.json

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
    c: _Checker, file: str, base: list, decoder: dict, graph: Graph, num_layers: int, inherited: dict[str, str] | None = None
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
        if not fams and templates:
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


def _num_layers(c: _Checker, file: str, where: str, value, default: int | None = None) -> int | None:
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        c.add(file, where, "must be a positive integer")
        return None
    return value


def _same_hidden(c: _Checker, file: str, where: str, main: Tensor, main_graph: str, head: Tensor, head_graph: str) -> None:
    what = f"main output {main.name!r} ({main_graph}) and head input {head.name!r} ({head_graph})"
    if main.dtype != head.dtype:
        c.add(file, where, f"{what} differ in dtype: {main.dtype} vs {head.dtype}")
    if main.shape is not None and head.shape is not None:
        if len(main.shape) != len(head.shape):
            c.add(file, where, f"{what} differ in rank: {len(main.shape)} vs {len(head.shape)} (dense vs packed layout)")
        if main.width != head.width:
            c.add(file, where, f"{what} differ in width (last dim): {main.width} vs {head.width}")


def _check_genai_config(c: _Checker, rel: str, cfg: dict) -> tuple[Graph | None, Graph | None]:
    """Returns (main graph, head graph) for cross-config checks."""
    base = _folder(rel)
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


def _check_mtp_against_main(c: _Checker, rel: str, decoder: dict, mtp: dict, main: Graph, head: Graph) -> None:
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
        _same_hidden(c, rel, where, main_t, main.relpath, head_t, head.relpath)
    out_name = head_outputs.get("hidden_states", "hidden_states_out")
    if out_name == head_name:
        c.add(rel, json_pointer("model", "mtp", "outputs", "hidden_states"), f"{out_name!r} must differ from the head's hidden-state input")
    for role in _PAGED_INPUTS:
        name = (decoder.get("inputs") or {}).get(role, role) if isinstance(decoder.get("inputs"), dict) else role
        if name in main.inputs and name not in head.inputs:
            c.add(rel, json_pointer("model", "mtp", "filename"), f"{main.relpath} is paged (input {name!r}) but {head.relpath} lacks that input; the head inherits the main decoder's paged inputs")


def _check_head_folder(c: _Checker, rel: str, cfg: dict, root_rel: str, root_cfg: dict, main: Graph | None) -> None:
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
    head_graph = c.graph(rel, json_pointer("model", "decoder", "filename"), dec.get("filename"), _folder(rel))
    main_name = (root_model.get("mtp") or {}).get("main_hidden_states", "hidden_states")
    if main is not None and head_graph is not None and main_name in main.outputs and head_input in head_graph.inputs:
        _same_hidden(c, rel, json_pointer("model", "decoder", "inputs", "hidden_states"), main.outputs[main_name], main.relpath, head_graph.inputs[head_input], head_graph.relpath)


def _check_shared_initializers(c: _Checker, rel: str, cfg: dict, main: Graph | None) -> None:
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


def _check_shared_entry(c: _Checker, rel: str, base: list, entry: dict, main: Graph | None) -> None:
    data_file = entry.get("data_file")
    data = c.resolve(rel, json_pointer(*base, "data_file"), data_file, _folder(rel), parent_ok=True) if isinstance(data_file, str) and data_file else None
    offset, length = entry.get("offset"), entry.get("length")
    # Malformed offsets / lengths are the schema's findings; only well-formed ones are measured.
    start = _byte_count(offset, None) if isinstance(offset, str) else None
    count = _byte_count(length, None) if isinstance(length, str) else None
    size = c.files[data].size() if data is not None else None
    if size is not None and start is not None and count is not None and start + count > size:
        c.add(rel, json_pointer(*base), f"offset {start} + length {count} ends at byte {start + count}, past the end of {data} ({size} bytes)")
    name = entry.get("name")
    if main is None or not isinstance(name, str) or not name:
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
        return TensorProto.DataType.Name(data_type)
    except (ValueError, TypeError):
        return "unknown"


# ----------------------------------------------------------------------------- onnx-genai metadata


def _metadata_layout(doc: dict) -> str:
    pipeline = doc.get("pipeline")
    return "workflow" if isinstance(pipeline, dict) and "workflow" in pipeline else "flat"


# The schema in schemas/ each package file must satisfy, by file name and, for onnx-genai's
# metadata, layout. The emitters declare the same schema on the artifacts they write
# (tests/test_checks.py holds the two together).
SCHEMAS: dict[tuple[str, str | None], str] = {
    (GENAI_CONFIG, None): "genai_config.schema.json",
    (INFERENCE_METADATA, "flat"): "inference_metadata.flat.schema.json",
    (INFERENCE_METADATA, "workflow"): "inference_metadata.workflow.schema.json",
    (HF_CONFIG, None): "speculator_config.schema.json",
}


def schema_for(file_name: str, layout: str | None = None) -> str | None:
    """The schema for a package file (`layout`: "flat" / "workflow", for the onnx-genai metadata only)."""
    return SCHEMAS.get((file_name, layout))


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


def _check_workflow(c: _Checker, rel: str, doc: dict) -> Graph | None:
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


def _check_flat(c: _Checker, rel: str, doc: dict) -> Graph | None:
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


def _check_speculator(c: _Checker, file: str, base: list, spec: dict, target: Graph | None, vocab_size) -> None:
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
                _same_hidden(c, file, json_pointer(*base, "target_hidden_output"), seed, target.relpath, head.inputs["hidden_states"], head.relpath)
        for key in ("embedding", "lm_head"):
            ref = spec.get(key)
            name = ref.get("name") if isinstance(ref, dict) else None
            if not name:
                continue
            init = target.initializers.get(name)
            if init is None:
                c.add(file, json_pointer(*base, key, "name"), f"{name!r} is not an initializer of {target.relpath}")
            elif key == "embedding" and init.shape and len(init.shape) == 2:
                if isinstance(vocab_size, int) and init.shape[0] != vocab_size:
                    c.add(file, json_pointer(*base, key, "name"), f"{name!r} has {init.shape[0]} rows but model.vocab_size is {vocab_size}")
                if isinstance(width, int) and init.shape[1] != width:
                    c.add(file, json_pointer(*base, key, "name"), f"{name!r} is {init.shape[1]} wide but target_hidden_size is {width!r}")
            elif key == "embedding":
                c.add(file, json_pointer(*base, key, "name"), f"{name!r} must be a dense 2-D [vocab, hidden] tensor, is {init.shape}")
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


# ----------------------------------------------------------------------------- entry point


def is_runtime_package(path: Path) -> bool:
    """A folder a runtime can load: it holds a genai_config.json or an onnx-genai metadata file."""
    return path.is_dir() and any((path / n).is_file() for n in (GENAI_CONFIG, INFERENCE_METADATA))


def _vocab_size(metadata_doc) -> int | None:
    """The target's `model.vocab_size`, which native MTP reads (None when not declared as an integer)."""
    vocab = (metadata_doc.get("model") or {}).get("vocab_size") if isinstance(metadata_doc, dict) else None
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None


def check_package(root: str | Path) -> list[Finding]:
    """All findings about the package in directory `root`, sorted; empty when it is sound."""
    return check_files(package_directory(root))


def check_files(files: Files) -> list[Finding]:
    """All findings about a package given as relpath -> bytes reader, sorted."""
    c = _Checker(files)
    configs = sorted(rel for rel in files if PurePosixPath(rel).name == GENAI_CONFIG)
    parsed = {}
    for rel in configs:
        cfg = c.parse(rel)
        if cfg is None:
            continue
        c.validate(rel, cfg, schema_for(GENAI_CONFIG))
        if isinstance(cfg, dict):
            parsed[rel] = cfg
    root_main = root_head = None
    for rel, cfg in parsed.items():
        main, head = _check_genai_config(c, rel, cfg)
        if rel == GENAI_CONFIG:
            root_main, root_head = main, head
    for rel, cfg in parsed.items():
        _check_shared_initializers(c, rel, cfg, root_main)
    if root_head is not None:
        for rel, cfg in parsed.items():
            if rel == GENAI_CONFIG:
                continue
            dec = (cfg.get("model") or {}).get("decoder") or {}
            filename = dec.get("filename")
            if isinstance(filename, str) and str(PurePosixPath(_folder(rel)) / filename) == root_head.relpath:
                _check_head_folder(c, rel, cfg, GENAI_CONFIG, parsed[GENAI_CONFIG], root_main)

    target = None
    metadata_doc = None
    if INFERENCE_METADATA in files:
        metadata_doc = c.parse(INFERENCE_METADATA)
        if isinstance(metadata_doc, dict):
            layout = _metadata_layout(metadata_doc)
            c.validate(INFERENCE_METADATA, metadata_doc, schema_for(INFERENCE_METADATA, layout))
            target = _check_workflow(c, INFERENCE_METADATA, metadata_doc) if layout == "workflow" else _check_flat(c, INFERENCE_METADATA, metadata_doc)
            flat_key = next((k for k in ("speculative", "speculator_config") if metadata_doc.get(k)), None)
            if layout == "flat" and flat_key is not None and isinstance(metadata_doc[flat_key], dict):
                _check_speculator(c, INFERENCE_METADATA, [flat_key], metadata_doc[flat_key], target, _vocab_size(metadata_doc))
        elif metadata_doc is not None:
            c.add(INFERENCE_METADATA, "", "must be a mapping")
    if HF_CONFIG in files:
        hf = c.parse(HF_CONFIG)
        spec = hf.get("speculator_config") if isinstance(hf, dict) else None
        if isinstance(spec, dict):
            c.validate(HF_CONFIG, hf, schema_for(HF_CONFIG))
            if target is None and "model.onnx" in files:
                target = c.graph(HF_CONFIG, "", "model.onnx")
            _check_speculator(c, HF_CONFIG, ["speculator_config"], spec, target, _vocab_size(metadata_doc))
    return c.result()
