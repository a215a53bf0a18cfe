"""The onnxruntime-genai profiles side by side: which release each names, what they share, and
that the genai_config schema lists what every profile accepts (no runtime needed here; each
profile is checked against its own release's parser in test_ort_genai_parser.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mtpc.profiles import ort_genai_0_17, ort_genai_0_18, ort_genai_profile, ort_genai_profiles
from mtpc.schema.validation import load_schema
from mtpc.util.diagnostics import MtpcError

PROFILES = ort_genai_profiles()


def test_each_release_is_found_by_its_version_and_its_minor_version():
    assert [p.version for p in PROFILES] == ["0.17.1", "0.18.0"]
    for spelled, profile in (("0.18", ort_genai_0_18.PROFILE), ("0.18.0", ort_genai_0_18.PROFILE),
                             ("0.17", ort_genai_0_17.PROFILE), ("0.17.1", ort_genai_0_17.PROFILE)):
        assert ort_genai_profile(spelled) is profile


def test_an_unknown_release_names_the_supported_ones():
    with pytest.raises(MtpcError) as caught:
        ort_genai_profile("0.16.0")
    assert "supported versions: 0.17.1, 0.18.0" in str(caught.value.diagnostics[0].hint)


def test_0_17_1_shares_0_18_0s_table_and_quirks_under_its_own_version():
    older, newer = ort_genai_0_17.PROFILE, ort_genai_0_18.PROFILE
    assert older.version == "0.17.1" and older.keys is newer.keys
    # The multimodal pipeline was measured on 0.18.0 only: a vision-language source compiles text only for 0.17.1.
    assert newer.vision_model_types and not older.vision_model_types
    assert older == replace(newer, version="0.17.1", vision_model_types=older.vision_model_types)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.version)
def test_no_profile_lists_a_key_only_0_18_0_parses(profile):
    for section, keys in ort_genai_0_17.NEWER_KEYS.items():
        assert not set(keys) & set(profile.keys.get(section, {})), section


def _schema_sections(schema: dict) -> dict[str, set[str]]:
    """Property names per profile section path, read from our JSON Schema."""
    defs = schema["$defs"]

    def resolve(node):
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    sections: dict[str, set[str]] = {}

    def walk(node, path):
        node = resolve(node)
        if node.get("type") == "array" and "items" in node:
            walk(node["items"], f"{path}[]")
        props = node.get("properties")
        if props is None:
            return
        sections[path] = set(props)
        for key, sub in props.items():
            walk(sub, f"{path}.{key}" if path else key)

    walk(schema, "")
    return sections


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.version)
def test_schema_and_profile_list_the_same_keys(profile):
    sections = _schema_sections(load_schema("genai_config"))
    for section, keys in profile.keys.items():
        if section in profile.open_string_sections and not keys:
            continue
        assert sections.get(section) == set(keys), section
