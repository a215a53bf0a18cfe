"""The installed onnxruntime-genai release's profile against that release's own parser.

`og.Config(dir)` parses genai_config.json without loading any graph, so every key
the profile lists can be checked for real: listed keys must load, unknown keys in
strict sections must be refused. The test environment installs 0.18.0;
tests/test_runtime_releases.py runs this file again with 0.17.1 installed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import onnxruntime_genai as og
import pytest

from mtpc.ir import AttentionMode
from mtpc.profiles import ort_genai_profile
from mtpc.profiles.ort_genai_0_17 import NEWER_KEYS
from mtpc.schema.validation import errors as schema_errors
from tests.fixtures.ort_release import INSTALLED
from tests.fixtures.shared import BUILDER_CONFIG_NAMES, builder_config

PROFILE = ort_genai_profile(INSTALLED)
REFUSED = f"not accepted by onnxruntime-genai {INSTALLED}"


BASE = {
    "model": {
        "type": "qwen3_5_text",
        "context_length": 64,
        "vocab_size": 256,
        "decoder": {
            "filename": "model.onnx",
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_size": 16,
            "num_hidden_layers": 4,
        },
    }
}
# Array items need their required keys to parse at all.
ITEM_TEMPLATES = {
    "model.decoder.state_groups[]": {"kind": "fixed_recurrent", "layer_ids": [0]},
    "model.decoder.shared_initializers[]": {
        "name": "w", "data_file": "model.onnx.data", "offset": "0", "length": "4", "data_type": 1, "shape": [1],
    },
}
ITEM_TEMPLATES["model.mtp.shared_initializers[]"] = ITEM_TEMPLATES["model.decoder.shared_initializers[]"]
OBJECT_TEMPLATES = {"model.decoder.state_groups[].state_update": {"capacity": 1, "key_head_count": 2}}
# Values the parser range-checks, where the kind's default sample would not do.
SAMPLES = {
    "model.decoder.session_options.graph_optimization_level": "ORT_ENABLE_ALL",
    "model.mtp.session_options.graph_optimization_level": "ORT_ENABLE_ALL",
    "model.embedding.session_options.graph_optimization_level": "ORT_ENABLE_ALL",
    "model.vision.session_options.graph_optimization_level": "ORT_ENABLE_ALL",
    "model.decoder.sliding_window.alignment": "left",
    "model.decoder.sliding_window.window_size": 8,
    "model.decoder.state_groups[].kind": "fixed_conv",
    "model.decoder.state_groups[].layer_ids": [1, 2],
    "model.decoder.shared_initializers[].offset": "16",
    "model.mtp.shared_initializers[].offset": "16",
    "model.eos_token_id": [2, 3],
    "speculative.ngram_size": 2,
    "model.decoder.layer_types": ["linear_attention", "full_attention"],
    "model.decoder.shared_initializers[].shape": [2, 2],
    "model.mtp.shared_initializers[].shape": [2, 2],
    "model.decoder.sliding_window.layers": [3],
}
KIND_SAMPLES = {"string": "x", "int": 1, "number": 0.5, "bool": True, "object": {}, "array": [], "int_or_array": 2}


def _load(tmp_path: Path, doc: dict) -> None:
    (tmp_path / "genai_config.json").write_text(json.dumps(doc), encoding="utf-8")
    og.Config(str(tmp_path))


def _container(doc: dict, section: str) -> dict:
    """The object at a profile section path, created (with templates for array items) as needed."""
    node = doc
    for part in filter(None, section.split(".")):
        item_path = section[: section.index(part) + len(part)]
        if part.endswith("[]"):
            key = part[:-2]
            node = node.setdefault(key, [copy.deepcopy(ITEM_TEMPLATES[item_path])])[0]
        else:
            node = node.setdefault(part, copy.deepcopy(OBJECT_TEMPLATES.get(item_path, {})))
    return node


KEYS = sorted((section, key) for section, keys in PROFILE.keys.items() for key in keys)


def test_the_installed_runtime_is_the_profiled_version():
    assert PROFILE.version == INSTALLED == og.__version__


@pytest.mark.parametrize("section, key", KEYS, ids=[f"{s}.{k}" if s else k for s, k in KEYS])
def test_every_listed_key_loads(tmp_path, section, key):
    doc = copy.deepcopy(BASE)
    path = f"{section}.{key}" if section else key
    container = _container(doc, section)
    kind = PROFILE.keys[section][key]
    if kind == "object":
        container.setdefault(key, copy.deepcopy(OBJECT_TEMPLATES.get(path, {})))
    elif f"{path}[]" in ITEM_TEMPLATES:
        container[key] = [copy.deepcopy(ITEM_TEMPLATES[f"{path}[]"])]
    else:
        container[key] = SAMPLES.get(path, KIND_SAMPLES[kind])
    _load(tmp_path, doc)


STRICT_SECTIONS = sorted(s for s in PROFILE.keys if s and s not in PROFILE.open_string_sections)


@pytest.mark.parametrize("section", STRICT_SECTIONS)
def test_unknown_keys_are_refused_in_strict_sections(tmp_path, section):
    doc = copy.deepcopy(BASE)
    _container(doc, section)["mtpc_unknown_key"] = "x"
    with pytest.raises(Exception, match='Unknown value "mtpc_unknown_key"'):
        _load(tmp_path, doc)
    assert PROFILE.unaccepted(doc) == [f"{section}.mtpc_unknown_key: {REFUSED}"]


def test_root_scalars_are_free_but_root_objects_are_not(tmp_path):
    doc = copy.deepcopy(BASE)
    doc["mtpc_note"] = "ignored"
    _load(tmp_path, doc)
    assert PROFILE.unaccepted(doc) == []
    doc["mtpc_section"] = {}
    with pytest.raises(Exception, match="mtpc_section"):
        _load(tmp_path, doc)
    assert PROFILE.unaccepted(doc) == [f"mtpc_section: {REFUSED}"]


@pytest.mark.parametrize("section", sorted(PROFILE.open_string_sections))
def test_open_sections_take_strings_only(tmp_path, section):
    doc = copy.deepcopy(BASE)
    _container(doc, section)["ep.some.entry"] = "1"
    _load(tmp_path, doc)
    assert PROFILE.unaccepted(doc) == []
    _container(doc, section)["ep.some.entry"] = 1
    with pytest.raises(Exception, match="Expected a string"):
        _load(tmp_path, doc)
    assert PROFILE.unaccepted(doc) == [f"{section}.ep.some.entry: {REFUSED}"]


def test_offsets_must_be_decimal_strings(tmp_path):
    doc = copy.deepcopy(BASE)
    _container(doc, "model.decoder.shared_initializers[]")["offset"] = 0
    with pytest.raises(Exception):
        _load(tmp_path, doc)
    assert PROFILE.unaccepted(doc) == ["model.decoder.shared_initializers[].offset: expected string, got int"]


@pytest.mark.parametrize("section, key", [(s, k) for s, keys in NEWER_KEYS.items() for k in keys])
def test_keys_newer_than_0_17_1_load_in_0_18_0_only(tmp_path, section, key):
    # Measured differences between the two releases' parsers; neither profile lists these keys.
    doc = copy.deepcopy(BASE)
    node = doc
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[key] = NEWER_KEYS[section][key]
    assert PROFILE.unaccepted(doc)
    if INSTALLED == "0.17.1":
        with pytest.raises(Exception, match=f'Unknown value "{key}"'):
            _load(tmp_path, doc)
    else:
        _load(tmp_path, doc)


def test_quirks():
    # MTP on CPU needs float16 logits; without a head, or off CPU, the I/O dtype stays.
    assert PROFILE.logits_dtype("cpu", "float32", emit_head=True) == "float16"
    assert PROFILE.logits_dtype("cpu", "float32", emit_head=False) == "float32"
    assert PROFILE.logits_dtype("cuda", "float32", emit_head=True) == "float32"
    assert PROFILE.logits_dtype("cpu", "float16", emit_head=True) == "float16"
    assert not PROFILE.shares_initializers("cpu")
    assert PROFILE.shares_initializers("cuda")
    # share_buffer: only a static dense cache and a paged one are written in place.
    assert PROFILE.past_present_share_buffer(AttentionMode.DENSE, "dynamic") is False
    assert PROFILE.past_present_share_buffer(AttentionMode.DENSE, "static") is True
    assert PROFILE.past_present_share_buffer(AttentionMode.PAGED, "dynamic") is True
    assert not PROFILE.supports_kv_cache(AttentionMode.PAGED, "static")


@pytest.mark.parametrize("name", BUILDER_CONFIG_NAMES)
def test_builder_configs_are_accepted_by_profile_schema_and_runtime(tmp_path, name):
    # Configs the 0.18.0 builder wrote (shared/reference/builder-configs): the profile, our
    # schema and the installed runtime (0.17.1 too) must all accept them.
    doc = json.loads(builder_config(name).read_text(encoding="utf-8"))
    assert PROFILE.unaccepted(doc) == []
    assert [e.message for e in schema_errors("genai_config", doc)] == []
    _load(tmp_path, doc)
