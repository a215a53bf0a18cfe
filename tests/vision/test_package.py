"""The vision-language package as files: the weights stored once (both decoders read one data file; the data
files within 1 % of the text package's plus the tower), `check` holding the pipeline's contracts (a package missing its
processor_config.json, or with patch size 14 anywhere, fails), `inspect` reporting the tower, `plan` showing
the tower's storage choices, `diff` naming vision changes, and the tower left out, with a note, for a runtime
that cannot run it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mtpc.checks import check_package
from mtpc.cli.main import main
from mtpc.pipeline.driver import build_ir
from tests.runtime.conftest import write_spec


def _bytes(folder: Path, pattern: str = "*") -> int:
    return sum(p.stat().st_size for p in folder.rglob(pattern) if p.is_file())


def _tower_bytes(release_folder: Path) -> int:
    """The tower's weights as the release stores them (safetensors headers: dtype sizes x shapes)."""
    from safetensors import safe_open

    total = 0
    for path in release_folder.glob("*.safetensors"):
        with safe_open(path, "np") as f:
            for name in f.keys():
                if name.startswith("model.visual."):
                    total += f.get_tensor(name).nbytes
    return total


def test_weights_are_stored_once(packages, releases):
    package, text = packages[("dense", "mtp")], packages[("dense", "text")]
    for graph in ("embeds_decoder.onnx", "embedding.onnx"):  # they read the text decoder's files, no copy
        assert not (package / f"{graph}.data").exists()
    locations = _data_files(package / "embeds_decoder.onnx")
    assert locations == _data_files(package / "model.onnx") == {"model.onnx.data", "mtp/mtp.onnx.data"}
    assert _data_files(package / "embedding.onnx") == {"mtp/mtp.onnx.data"}  # the embedding's one copy
    # The weights: the text package's data files plus the tower's, within 1 % (here to the byte).
    tower = _tower_bytes(releases[("dense", True)].folder)
    assert _bytes(package, "*.data") <= (_bytes(text, "*.data") + tower) * 1.01, (_bytes(package, "*.data"), _bytes(text, "*.data"), tower)
    # The rest is the three graphs' structure and two small configs: a fixed cost, not the model's size (about
    # 60 KB, 6 % of this tiny model and nothing beside a real one's gigabytes).
    assert _bytes(package) - _bytes(text) - tower < 80_000
    assert not (text / "vision.onnx").exists()


def _data_files(graph: Path) -> set[str]:
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    return {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}


def _mutant(package: Path, tmp_path: Path, edit) -> list[str]:
    copy = tmp_path / "mutant"
    shutil.copytree(package, copy)
    edit(copy)
    return [f.render() for f in check_package(copy) if f.blocking]


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _processor_steps(doc: dict) -> dict:
    return {t["operation"]["type"]: t["operation"].setdefault("attrs", {}) for t in doc["processor"]["transforms"]}


MUTANTS = {
    "processor_config.json missing": (lambda d: (d / "processor_config.json").unlink(),
                                      "'processor_config.json' does not exist in the package"),
    "genai_config patch size 14": (lambda d: _edit_json(d / "genai_config.json", lambda c: c["model"]["vision"].update(patch_size=14)),
                                   "the patch size differs across the pipeline"),
    "genai_config patch size left to its default": (
        lambda d: _edit_json(d / "genai_config.json", lambda c: c["model"]["vision"].pop("patch_size")),
        "model.vision.patch_size 14"),
    "processor patch size 14": (
        lambda d: _edit_json(d / "processor_config.json", lambda c: [a.update(patch_size=14) for k, a in
                                                                     _processor_steps(c).items() if k != "Normalize"]),
        "the patch size differs across the pipeline"),
    "merge size 1": (lambda d: _edit_json(d / "genai_config.json", lambda c: c["model"]["vision"].update(spatial_merge_size=1)),
                     "the merge size differs across the pipeline"),
    "no qwen3_vl normalize": (lambda d: _edit_json(d / "processor_config.json", lambda c: _processor_steps(c)["Normalize"].pop("qwen3_vl")),
                              "Normalize lacks qwen3_vl: 1"),
    "per-image loop": (lambda d: _edit_json(d / "genai_config.json", lambda c: c["model"]["vision"]["inputs"].update(image_grid_thw="image_grid_thw")),
                       "which takes every image at once"),
    "image token outside the vocabulary": (lambda d: _edit_json(d / "genai_config.json", lambda c: c["model"].update(image_token_id=272)),
                                           "272 is outside the vocabulary (vocab_size 272)"),
    "image token not the tokenizer's": (lambda d: _edit_json(d / "genai_config.json", lambda c: c["model"].update(image_token_id=264)),
                                        "is 264 but tokenizer.json encodes <|image_pad|> as 265"),
    "text overlay missing": (lambda d: (d / "text_overlay.json").unlink(), "text_overlay.json:/: is missing: og.MtpGenerator"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_check_refuses_a_broken_pipeline(packages, tmp_path, name):
    edit, expected = MUTANTS[name]
    findings = _mutant(packages[("dense", "mtp")], tmp_path, edit)
    assert any(expected in f for f in findings), findings


def test_check_passes_the_package_and_fails_the_acceptance_mutants_by_exit_code(packages, tmp_path, capsys):
    package = packages[("dense", "mtp")]
    assert main(["check", str(package)]) == 0, capsys.readouterr()
    for name in ("processor_config.json missing", "genai_config patch size 14"):
        copy = tmp_path / name.replace(" ", "-")
        shutil.copytree(package, copy)
        MUTANTS[name][0](copy)
        assert main(["check", str(copy)]) == 1, name


def test_inspect_reports_the_tower(releases, capsys):
    assert main(["inspect", str(releases[("dense", True)].folder)]) == 0
    out = capsys.readouterr().out
    assert "vision tower:       2 blocks, hidden 32, 2 heads, patch 16 (temporal 2), merge 2, out 64; image token 265" in out
    assert "image input:        1024..65536 pixels, mean [0.5, 0.5, 0.5], std [0.5, 0.5, 0.5]" in out
    assert "vision_tensors:     33" in out


def test_plan_shows_the_towers_storage_on_lines_of_its_own(releases, vision_dir, capsys):
    spec = write_spec(vision_dir / "plan-int4.yaml", "plan-int4", f"{{hf: {releases[('dense', True)].folder.name}}}",
                      "quantization:\n  default: {bits: 4, block_size: 32}\n")
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "11 linear float32 -> int4 MatMulNBits block 32 accuracy 4 (lossy): visual.*.weight" in out
    assert "22 tensor float32 -> float32 (lossless): visual.*" in out
    assert "vision: vision.onnx (2 blocks, hidden 32" in out


def test_diff_names_vision_changes(packages, tmp_path, capsys):
    package = packages[("dense", "mtp")]
    copy = tmp_path / "changed"
    shutil.copytree(package, copy)
    _edit_json(copy / "processor_config.json", lambda c: _processor_steps(c)["Resize"].update(min_pixels=4096))
    assert main(["diff", str(package), str(copy)]) == 1
    out = capsys.readouterr().out
    assert "processor_config.json:/processor/transforms[name=resize]/operation/attrs/min_pixels: 1024 -> 4096" in out
    assert main(["diff", str(package), str(packages[("dense", "fp16")])]) == 1
    assert "vision.onnx:" in capsys.readouterr().out


@pytest.mark.parametrize("target, reason", [
    ('targets:\n  onnxruntime_genai: {version: "0.17.1", execution_provider: cpu}\n',
     "onnxruntime-genai 0.17.1's multimodal pipeline was not measured with it"),
    ("targets:\n  onnx_genai: {layout: flat}\n",
     "only onnxruntime-genai's multimodal pipeline runs it, and the spec has no onnxruntime_genai target"),
])
def test_the_tower_is_left_out_where_the_runtime_cannot_run_it(releases, vision_dir, target, reason):
    spec = vision_dir / "left-out.yaml"
    spec.write_text(f"mtpc: 1\nname: left-out\nsource: {{hf: {releases[('dense', True)].folder.name}}}\n{target}")
    ir, _ = build_ir(spec)
    assert ir.vision is None and not any(w.name.startswith("visual.") for w in ir.weights)
    assert f"the checkpoint's vision tower is left out (a text-only package): {reason}" in ir.notes


def test_the_cards_snippets_run_in_the_package(packages, images, monkeypatch, capsys):
    """The card's two snippets, as written: images through og.Generator, text through og.MtpGenerator on the
    text view."""
    import re

    package = packages[("dense", "mtp")]
    card = (package / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: image-text-to-text" in card
    snippets = re.findall(r"```python\n(.*?)```", card, re.S)
    assert len(snippets) == 2
    monkeypatch.chdir(package)
    for snippet, names in zip(snippets, ({"question": " the in", "image_path": str(images["small"])},
                                         {"prompt_token_ids": [76, 111, 111, 107]})):
        exec(compile(snippet, "README.md", "exec"), dict(names))
        tokens = [int(t) for t in capsys.readouterr().out.replace(",", " ").strip(" []\n").split()]
        prompt = names.get("prompt_token_ids")
        assert tokens[:4] == prompt if prompt else len(tokens) == 64  # the card's max_length (text: until an end token)
        assert len(tokens) > 4


def test_verify_and_tune_run_the_text_view(packages, vision_dir, capsys):
    """`mtpc verify` runs the text decoder the head drafts for (greedy against the numpy reference, MTP against
    greedy) and the vision graph against the tower's reference; `tune` opens the text view too: the text
    decoder's state window, not the pipeline decoder's."""
    from mtpc.tuning.package import open_package

    package = packages[("dense", "mtp")]
    assert open_package(package).state_window == 5
    assert main(["verify", str(package), "--spec", str(vision_dir / "dense-mtp.yaml")]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "ok   speculative == greedy" in out
    # The tower against the numpy reference, as the processor hands it one image after another and padded.
    assert "ok   vision features:" in out and "ok   vision features, padded as og's processor hands two images:" in out
