"""The vision tower of a vision-language checkpoint (Qwen3.5's `model.visual.*`) and what the package runs it with.

`VisionModel` is what the source says (`Architecture.vision`): the tower's sizes, the token ids the
text side marks images with, and the image processor's settings (the checkpoint's
`preprocessor_config.json`). `VisionPipeline` is what the package builds for onnxruntime-genai's
multimodal pipeline (`ModelIR.vision`, set by `passes/vision.py`): the vision graph, the embedding
graph and a decoder that takes `inputs_embeds`, beside the text decoder the MTP head drafts for.

The tower is transformers' `Qwen3_5VisionModel` (Qwen3-VL's encoder without deepstack and without
window attention): a Conv3d patch embedding (stored as a linear over the flattened patch), a learned
position table resampled to each image's grid, 2-D rotary, `depth` pre-norm blocks with full attention
over each frame, and a patch merger (LayerNorm, then an MLP over each `merge x merge` block).
"""

from __future__ import annotations

from dataclasses import dataclass

from .runtime import DecoderConfig, GraphContract


@dataclass(frozen=True)
class VisionTower:
    depth: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    # Width of the merged features, the text model's hidden size.
    out_hidden_size: int
    num_position_embeddings: int
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    rope_theta: float = 10000.0
    # The blocks' MLP activation (transformers' ACT2FN name); the merger's is exact GELU.
    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_width(self) -> int:
        """Values in one flattened patch: channels x temporal patch x patch x patch (1536 for Qwen3.5)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def grid_side(self) -> int:
        """Side of the square learned position table."""
        return int(self.num_position_embeddings**0.5)

    @property
    def merged_width(self) -> int:
        return self.hidden_size * self.spatial_merge_size**2

    def summary(self) -> str:
        return (f"{self.depth} blocks, hidden {self.hidden_size}, {self.num_heads} heads, patch {self.patch_size} "
                f"(temporal {self.temporal_patch_size}), merge {self.spatial_merge_size}, out {self.out_hidden_size}")


@dataclass(frozen=True)
class VisionTokens:
    """The ids the text side marks media with (config.json's top level)."""

    image: int
    video: int
    vision_start: int
    vision_end: int


@dataclass(frozen=True)
class ImagePreprocessing:
    """The image processor's settings (transformers' Qwen2VLImageProcessor keys), which the runtime's own
    processor is configured with (`processor_config.json`)."""

    min_pixels: int
    max_pixels: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    rescale_factor: float = 1 / 255


@dataclass(frozen=True)
class VisionModel:
    tower: VisionTower
    tokens: VisionTokens
    preprocessing: ImagePreprocessing


# Graph files of the multimodal pipeline (onnxruntime-genai's names for its three sessions are its config's).
VISION_GRAPH = "vision.onnx"
EMBEDDING_GRAPH = "embedding.onnx"
EMBEDS_DECODER_GRAPH = "embeds_decoder.onnx"
PROCESSOR_CONFIG = "processor_config.json"
# Metadata of the vision graph: the sizes it was built for (the contract checks compare them).
PATCH_SIZE_KEY = "mtpc.vision.patch_size"
MERGE_SIZE_KEY = "mtpc.vision.spatial_merge_size"
TEMPORAL_PATCH_KEY = "mtpc.vision.temporal_patch_size"
# The overlay that turns the package's genai_config.json into its text view (`og.Config.overlay`).
TEXT_OVERLAY = "text_overlay.json"


@dataclass(frozen=True)
class VisionPipeline:
    """The graphs onnxruntime-genai's multimodal pipeline runs: vision -> embedding -> `decoder`."""

    vision: GraphContract
    embedding: GraphContract
    # The text model taking `inputs_embeds`: the main decoder's layers, weights and outputs (its hidden
    # states included, so the head's wiring is the text decoder's), unwindowed.
    decoder: DecoderConfig
    vision_filename: str = VISION_GRAPH
    embedding_filename: str = EMBEDDING_GRAPH
