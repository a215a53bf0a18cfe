"""The package README: says what the package holds and how to run it, the same bytes every time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from mtpc.emit.inference_metadata import emit_inference_metadata
from mtpc.emit.model_card import emit_model_card
from mtpc.ir import OnnxGenaiTarget
from mtpc.profiles.onnx_genai import PROFILE
from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import CUDA_PAGED, compiled


def card(ir, facts=()) -> str:
    (artifact,) = emit_model_card(ir, SimpleNamespace(info=SimpleNamespace(card=facts), speed_table=None))
    assert artifact.relpath == "README.md" and artifact.schema is None
    return artifact.read().decode("utf-8")


def test_card_with_head_shows_how_to_run_speculative_decoding():
    text = card(compiled())
    assert text.split("\n---\n", 1)[1].startswith("\n# tiny\n")
    assert "4 layers: 2 full attention, 2 linear attention" in text
    assert "`mtp/mtp.onnx`" in text
    assert 'og.MtpGenerator(model, og.Model("mtp"), params)' in text
    assert "max_draft_tokens=2" in text  # the default
    assert "mtpc check ." in text


def test_paged_card_names_the_engine_and_offers_no_dense_snippet():
    """A paged package runs in onnxruntime-genai's paged engine on its GPU provider, not in the dense loop."""
    text = card(compiled(ort=CUDA_PAGED))
    assert "```python" not in text and "MtpGenerator" not in text
    assert "paged attention on the `cuda` execution provider" in text
    assert "`og.Engine`" in text and "drafting with the head named in `model.mtp`" in text


def test_card_is_deterministic_and_has_no_absolute_paths():
    a, b = card(compiled()), card(compiled())
    assert a == b
    assert "/tmp" not in a and "/work" not in a


def test_text_only_card_has_no_trace_of_mtp():
    text = card(compiled(arch=tiny_arch(mtp_num_layers=0)))
    assert "text only" in text
    assert "MTP" not in text and "mtp/" not in text and "MtpGenerator" not in text
    assert "og.Generator(model, params)" in text


def _onnx_genai_head_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if "the MTP head for onnx-genai" in line]
    return line


def test_card_names_where_the_onnx_genai_head_is_declared_and_what_runs_it():
    # Where the declaration really is comes from the metadata emitter's files, not from the card.
    ir = compiled(ort=None, onnx_genai=OnnxGenaiTarget(layout="flat"))
    files = {a.relpath: a.read() for a in emit_inference_metadata(ir, None)}
    assert "speculator_config" in json.loads(files["config.json"])
    text = card(ir)
    line = _onnx_genai_head_line(text)
    assert line.startswith("- `mtp_sidecar/mtp_sidecar.onnx` (+ `.data`)") and "`config.json` (`speculator_config`)" in line
    assert f"checked against onnx-genai {PROFILE.commit[:7]}" in text
    # Only onnx-genai's native backend builds the MTP proposer (mtpc.profiles.onnx_genai).
    section = text[text.index("## Run with onnx-genai"):]
    assert 'onnx-genai generate . "your prompt" --backend native --temperature 0' in section
    assert "`native-backend` feature" in section and "ONNX_GENAI_BACKEND=native" in section
    assert "Python and C APIs" in section


def test_text_only_card_runs_onnx_genai_without_a_backend_choice():
    text = card(compiled(arch=tiny_arch(mtp_num_layers=0), onnx_genai=OnnxGenaiTarget()))
    section = text[text.index("## Run with onnx-genai"):text.index("## Weights")]
    assert 'onnx-genai generate . "your prompt"\n' in section and "native" not in section


def test_no_onnx_genai_target_no_onnx_genai_section():
    assert "onnx-genai" not in card(compiled()).split("\n---\n", 1)[1]


def _python_snippet(card: str) -> str:
    start = card.index("```python\n") + len("```python\n")
    return card[start : card.index("```", start)]


@pytest.mark.parametrize("spec", ["qwen35-tiny-mtp", "qwen35-tiny-nohead"])
def test_card_snippet_runs_in_the_compiled_package(spec, tmp_path, monkeypatch, capsys):
    """The card's own code must decode with the package it describes, as written."""
    from pathlib import Path

    from mtpc.pipeline.driver import build
    from mtpc.output.write import write_package

    repo = Path(__file__).resolve().parents[2]
    package = tmp_path / spec
    write_package(build(repo / "specs" / f"{spec}.yaml").artifacts, package)
    snippet = _python_snippet((package / "README.md").read_text(encoding="utf-8"))
    monkeypatch.chdir(package)
    exec(compile(snippet, "README.md", "exec"), {"prompt_token_ids": [5, 6, 7, 8]})
    printed = capsys.readouterr().out
    tokens = [int(t) for t in printed.replace(",", " ").strip(" []\n").split()]
    assert tokens[:4] == [5, 6, 7, 8] and len(tokens) == 64  # the card's max_length


# ---- Hugging Face front matter ------------------------------------------------------------


def front_matter(text: str) -> dict:
    """The card's front matter as the Hub reads it: a YAML mapping between the first two `---` lines."""
    assert text.startswith("---\n")
    block, rest = text[4:].split("\n---\n", 1)
    assert rest.lstrip("\n").startswith("# ")
    doc = yaml.safe_load(block)
    assert isinstance(doc, dict)
    return doc


def test_front_matter_names_library_task_and_tags():
    doc = front_matter(card(compiled()))
    assert doc["library_name"] == "onnx"
    assert doc["pipeline_tag"] == "text-generation"
    assert {"onnx", "mtpc", "qwen35", "onnxruntime-genai", "mtp", "speculative-decoding"} <= set(doc["tags"])
    assert "base_model" not in doc and "license" not in doc  # a synthetic source states neither


def test_front_matter_of_a_text_only_package_has_no_mtp_tags():
    doc = front_matter(card(compiled(arch=tiny_arch(mtp_num_layers=0))))
    assert not [t for t in doc["tags"] if "mtp" in t.replace("mtpc", "") or "specul" in t]


def test_front_matter_carries_base_model_and_license_as_strings_yaml_reads_back():
    doc = front_matter(card(compiled(), facts=(("base_model", "Qwen/Qwen3.5-0.8B"), ("license", "apache-2.0"))))
    assert doc["base_model"] == "Qwen/Qwen3.5-0.8B" and doc["license"] == "apache-2.0"
    # A license that YAML 1.1 would read as a boolean stays a string.
    assert front_matter(card(compiled(), facts=(("license", "on"),)))["license"] == "on"


def test_gguf_facts_come_from_its_general_keys():
    from mtpc.sources.card_facts import gguf_card_facts

    facts = dict(gguf_card_facts({
        "general.source.repo_url": "https://huggingface.co/Qwen/Qwen3.5-27B",
        "general.base_model.0.repo_url": "https://huggingface.co/Qwen/Qwen3.5-27B-Base",  # the source's parent: not ours
        "general.license": "Apache-2.0",
    }))
    assert facts == {"base_model": "Qwen/Qwen3.5-27B", "license": "apache-2.0"}
    assert gguf_card_facts({"general.source.repo_url": "https://example.com/a/b"}) == ()


def test_hf_checkpoint_in_the_hub_cache_names_its_repo_and_readme_license(tmp_path):
    from mtpc.cli.main import main
    from tests.fixtures.checkpoints import write_hf_checkpoint

    ckpt = write_hf_checkpoint(tmp_path / "hub" / "models--Qwen--Qwen3.5-0.8B" / "snapshots" / "abc123", tiny_arch())
    (ckpt / "README.md").write_text("---\nlicense: apache-2.0\nbase_model: Qwen/Qwen3.5-0.8B-Base\n---\n# Qwen3.5\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"mtpc: 1\nname: s\nsource:\n  hf: {ckpt.relative_to(tmp_path)}\ntargets:\n  onnxruntime_genai: {{}}\n")
    assert main(["compile", str(spec), "-o", str(tmp_path / "pkg"), "-q"]) == 0
    doc = front_matter((tmp_path / "pkg" / "README.md").read_text())
    assert doc["base_model"] == "Qwen/Qwen3.5-0.8B" and doc["license"] == "apache-2.0"
