"""The vision pass: which packages get onnxruntime-genai's multimodal pipeline, and what its decoder is."""

from dataclasses import replace

import pytest

from mtpc.ir import HeadContract
from mtpc.ir.vision import ImagePreprocessing, VisionModel, VisionTokens, VisionTower
from mtpc.passes.vision import VisionPipelineLowering

from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import CPU_DENSE, CUDA_PAGED, compiled

TOWER = VisionTower(depth=2, hidden_size=32, num_heads=2, intermediate_size=48, out_hidden_size=64,
                    num_position_embeddings=36)
VISION = VisionModel(TOWER, VisionTokens(image=250, video=251, vision_start=248, vision_end=249),
                     ImagePreprocessing(min_pixels=1024, max_pixels=65536, image_mean=(0.5,) * 3, image_std=(0.5,) * 3))


def _arch(**kw):
    return replace(tiny_arch(**kw), vision=VISION)


def test_the_pipeline_decoder_is_the_text_decoder_on_inputs_embeds_unwindowed():
    ir = compiled(arch=_arch())
    v = ir.vision
    assert v is not None and ir.main.state_window == 3  # max_draft_tokens 2 (the default) + 1
    decoder = v.decoder
    assert decoder.filename == "embeds_decoder.onnx" and decoder.state_window == 0
    assert decoder.input_name("inputs_embeds") == "inputs_embeds" and decoder.input_name("input_ids") is None
    assert decoder.contract.input("inputs_embeds").shape == ("batch_size", "sequence_length", 64)
    # Every other tensor is the text decoder's, its state without the window axis; the head's wiring is the same.
    text = {t.name: t for t in ir.main.contract.all() if t.name != "input_ids"}
    for t in decoder.contract.all():
        if t.name == "inputs_embeds":
            continue
        windowed = t.name.endswith((".conv", ".recurrent"))
        assert t == (replace(text[t.name], shape=text[t.name].shape[1:]) if windowed else text[t.name]), t.name
    assert decoder.output_name("hidden_states") == ir.main.output_name("hidden_states") == "hidden_states"
    assert ir.head(HeadContract.ORT_GENAI) is not None
    assert [t.name for t in v.vision.inputs] == ["pixel_values", "image_grid_thw"]
    assert v.vision.input("pixel_values").shape == ("num_patches", 1536)
    assert v.vision.outputs[0].dtype == v.embedding.input("image_features").dtype == "float32"
    assert any(w.name.startswith("visual.") for w in ir.weights)


def test_the_pass_is_idempotent_and_says_what_it_did():
    ir = compiled(arch=_arch())
    again = VisionPipelineLowering()(ir)
    assert not again.modified and again.ir == ir
    fresh = VisionPipelineLowering()(replace(ir, vision=None))
    assert fresh.modified and fresh.ir == ir
    assert any("embeds_decoder.onnx, the text model on inputs_embeds" in line for line in fresh.changes)


@pytest.mark.parametrize("kw, reason", [
    (dict(ort=None), "the spec has no onnxruntime_genai target"),
    (dict(ort=replace(CPU_DENSE, version="0.17.1")), "onnxruntime-genai 0.17.1's multimodal pipeline was not measured"),
    (dict(ort=CUDA_PAGED), "onnxruntime-genai's paged engine runs text only"),
])
def test_the_tower_is_left_out_with_a_note(kw, reason):
    ir = compiled(arch=_arch(), **kw)
    assert ir.vision is None and not any(w.name.startswith("visual.") for w in ir.weights)
    assert any(reason in note and "vision tower is left out" in note for note in ir.notes)


def test_a_text_model_is_untouched():
    ir = compiled()
    assert ir.vision is None and not any("vision" in note for note in ir.notes)
