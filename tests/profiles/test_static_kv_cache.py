"""`kv_cache: static` against the real onnxruntime-genai (the installed release): the share-buffer config it
emits parses and decodes like the numpy reference, and a head-bearing source then gives
exactly the text-only package `mtp.head: off` gives."""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime_genai as og
import pytest

from mtpc import sources
from mtpc.pipeline.driver import build
from mtpc.output.write import write_package
from mtpc.reference.forward import Qwen35Reference
from tests.fixtures.ort_release import for_installed_release
from tests.fixtures.package_files import files_of

TINY = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"
STEPS = 10
PROMPTS = ([5, 17, 42], [1, 2, 3, 4, 5, 6, 7, 8, 9], [200])


def tiny_variant(folder: Path, *, head: str, kv_cache: str) -> Path:
    """The shipped tiny spec (its source ships an MTP head) with the head policy and KV cache set."""
    text = for_installed_release(TINY.read_text(encoding="utf-8"))
    for old, new in (
        ("  head: auto ", f"  head: {head} "),
        ("    attention: dense\n", f"    attention: dense\n    kv_cache: {kv_cache}\n"),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    folder.mkdir()
    spec = folder / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def compiled(folder: Path, **settings):
    result = build(tiny_variant(folder, **settings))
    write_package(result.artifacts, folder / "pkg")
    return result, folder / "pkg"


@pytest.fixture(scope="module")
def static_auto(tmp_path_factory):
    return compiled(tmp_path_factory.mktemp("static") / "auto", head="auto", kv_cache="static")


@pytest.fixture(scope="module")
def static_off(tmp_path_factory):
    return compiled(tmp_path_factory.mktemp("static") / "off", head="off", kv_cache="static")


def test_the_skipped_head_is_noted_and_leaves_nothing_behind(static_auto, static_off):
    (auto_build, auto_pkg), (off_build, off_pkg) = static_auto, static_off
    assert auto_build.info.architecture.mtp_num_layers == 1  # the source does ship a head
    assert [n for n in auto_build.ir.notes if n.startswith("MTP head skipped: a static KV cache target")]
    assert not [n for n in off_build.ir.notes if "MTP head skipped" in n]
    assert auto_build.ir.mtp.emit_head is False
    auto_files, off_files = files_of(auto_pkg), files_of(off_pkg)
    # provenance.json records each package's own spec, which differ by the `mtp.head` line: only that may differ.
    recorded = [json.loads(files.pop("provenance.json")) for files in (auto_files, off_files)]
    assert recorded[0]["spec"] != recorded[1]["spec"]
    assert {k: v for k, v in recorded[0].items() if k != "spec"} == {k: v for k, v in recorded[1].items() if k != "spec"}
    # The manifests then differ in provenance.json's entry alone.
    listed = [{f["name"]: f for f in json.loads(files.pop("manifest.json"))["files"]} for files in (auto_files, off_files)]
    assert listed[0].pop("provenance.json") != listed[1].pop("provenance.json") and listed[0] == listed[1]
    assert sorted(auto_files) == sorted(off_files)
    for relpath in sorted(auto_files):
        assert auto_files[relpath] == off_files[relpath], f"{relpath} differs from the head: off package"
    assert not [f for f in auto_files if "mtp" in f]


def test_the_config_asks_for_a_shared_buffer_and_the_runtime_parses_it(static_auto):
    _, pkg = static_auto
    doc = json.loads((pkg / "genai_config.json").read_text(encoding="utf-8"))
    assert doc["search"]["past_present_share_buffer"] is True
    assert "mtp" not in doc["model"] and "speculative" not in doc
    og.Config(str(pkg))  # raises on any key or type the installed release refuses


def test_greedy_decoding_with_the_static_cache_equals_the_reference(static_auto):
    result, pkg = static_auto
    reference = Qwen35Reference(result.ir.architecture, sources.open_weights(result.ir.source, result.info))
    model = og.Model(str(pkg))
    for prompt in PROMPTS:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + STEPS)
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)
        while not generator.is_done():
            generator.generate_next_token()
        tokens = [int(t) for t in generator.get_sequence(0)][len(prompt) :]
        assert tokens == reference.greedy(prompt, STEPS), prompt
