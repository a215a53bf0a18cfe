"""The I/O contracts of the multimodal pipeline's graphs (`ir/vision.py` says what the pipeline is)."""

from __future__ import annotations

from dataclasses import replace

from .contracts import BATCH, SEQUENCE
from .runtime import DecoderConfig, GraphContract, TensorSpec
from .vision import EMBEDS_DECODER_GRAPH, VisionTower

NUM_PATCHES = "num_patches"
NUM_IMAGES = "num_images"
NUM_IMAGE_TOKENS = "num_image_tokens"
# The names onnxruntime-genai's processor gives its tensors (`pixel_values`, `image_grid_thw`) and its
# embedding / decoder sessions look up by default.
PIXEL_VALUES, IMAGE_GRID, IMAGE_FEATURES, INPUTS_EMBEDS = "pixel_values", "image_grid_thw", "image_features", "inputs_embeds"


def vision_contract(tower: VisionTower) -> GraphContract:
    """Every image of a prompt in one run: pixels float32 as the processor makes them, features float32 whatever
    the tower's dtype (a few rows per image; the embedding graph casts them to the text model's)."""
    return GraphContract(
        (TensorSpec(PIXEL_VALUES, "float32", (NUM_PATCHES, tower.patch_width)),
         TensorSpec(IMAGE_GRID, "int64", (NUM_IMAGES, 3))),
        (TensorSpec(IMAGE_FEATURES, "float32", (NUM_IMAGE_TOKENS, tower.out_hidden_size)),),
    )


def embedding_contract(hidden_size: int, io_dtype: str) -> GraphContract:
    return GraphContract(
        (TensorSpec("input_ids", "int64", (BATCH, SEQUENCE)),
         TensorSpec(IMAGE_FEATURES, "float32", (NUM_IMAGE_TOKENS, hidden_size))),
        (TensorSpec(INPUTS_EMBEDS, io_dtype, (BATCH, SEQUENCE, hidden_size)),),
    )


def embeds_decoder(main: DecoderConfig, hidden_size: int, io_dtype: str) -> DecoderConfig:
    """`main` taking `inputs_embeds` in place of `input_ids`, its state unwindowed (the multimodal pipeline
    never crops it); the same layers, weights and outputs, the hidden states the head reads among them."""
    ids = main.input_name("input_ids")
    templates = dict(main.inputs + main.outputs)
    state = {templates[r] % i for r in ("past_conv_names", "past_recurrent_names", "present_conv_names",
                                         "present_recurrent_names") if r in templates for i in range(len(main.layer_kinds))}

    def respec(t: TensorSpec) -> TensorSpec:
        if t.name == ids:
            return TensorSpec(INPUTS_EMBEDS, io_dtype, (BATCH, SEQUENCE, hidden_size))
        if main.state_window and t.name in state:
            return replace(t, shape=t.shape[1:])
        return t

    contract = GraphContract(tuple(map(respec, main.contract.inputs)), tuple(map(respec, main.contract.outputs)))
    inputs = tuple(("inputs_embeds", INPUTS_EMBEDS) if role == "input_ids" else (role, name) for role, name in main.inputs)
    return replace(main, filename=EMBEDS_DECODER_GRAPH, inputs=inputs, contract=contract, state_window=0)
