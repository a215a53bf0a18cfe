"""Derive the MTP head's decoder configs from the main decoder's.

Mirrors onnxruntime-genai's `CreateMtpDecoderConfig`: start from a full copy of
the main decoder, then

- replace: filename, layer count (one full-attention layer), KV geometry, the
  head's I/O names and contract, shared initializers (the head shares only what
  its own list names, so the main list is not inherited);
- drop: state groups, linear-attention (conv) metadata, sliding window;
- keep: hidden size, attention heads, execution provider and session options.

The head's FFN is the architecture's: a Qwen3.5-MoE head block is sparse like every trunk layer
(`Architecture.moe`, built by `graphs/moe.py`), and onnxruntime-genai's config has no key for it.

It runs before `PagedIoRewrite`, so the main decoder is still dense here and
every head is written dense; that pass packs onnxruntime_genai's head together
with the main decoder (the head reads the target's block table).

One config per head contract: onnxruntime_genai's head (`mtp/mtp.onnx`, in its
own folder because og.MtpGenerator loads the head as a model of its own) and
onnx-genai's sidecar (`mtp_sidecar/mtp_sidecar.onnx`, dense: that runtime has no paged mode; in a folder
of its own because onnx-genai takes the root's only `.onnx` file for the target model).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.contracts import (
    ONNX_GENAI_HEAD_INPUT_NAMES,
    ONNX_GENAI_HEAD_OUTPUT_NAMES,
    ORT_HEAD_INPUT_NAMES,
    ORT_HEAD_OUTPUT_NAMES,
    onnx_genai_head_contract,
    ort_head_contract,
)
from ..ir import AttentionMode, DecoderConfig, HeadContract, LayerKind, ModelIR
from ..profiles.onnx_genai import PROFILE as ONNX_GENAI
from .pipeline import PassResult

ORT_HEAD_FILENAME = "mtp/mtp.onnx"
ONNX_GENAI_HEAD_FILENAME = f"{ONNX_GENAI.sidecar_folder}/mtp_sidecar.onnx"


class MtpHeadProjection:
    name = "mtp-projection"

    def __call__(self, ir: ModelIR) -> PassResult:
        if ir.mtp.emit_head is None:
            raise AssertionError("MtpHeadProjection runs after HeadDetection")
        heads: list[tuple[HeadContract, DecoderConfig]] = []
        if ir.mtp.emit_head:
            if ir.targets.onnxruntime_genai is not None:
                heads.append((HeadContract.ORT_GENAI, _ort_head(ir)))
            if ir.targets.onnx_genai is not None:
                heads.append((HeadContract.ONNX_GENAI, _onnx_genai_head(ir)))
        new_heads = tuple(heads)
        if new_heads == ir.heads:
            return PassResult(ir, False)
        changes = tuple(
            f"head {contract.value}: {cfg.filename}, {_layer(ir)}, {cfg.num_key_value_heads} KV heads x {cfg.head_size}"
            for contract, cfg in new_heads
        ) or ("no head: cleared head configs",)
        return PassResult(replace(ir, heads=new_heads), True, changes)


def _layer(ir: ModelIR) -> str:
    """The head's layer as `plan` shows it: a sliding one says where its window is applied."""
    attention = ir.architecture.attention_at(None)
    if attention.window is None:
        return "1 full-attention layer"
    # onnxruntime-genai's CreateMtpDecoderConfig resets the head's sliding_window (shared/reference/genai-config.md 5.3), and a
    # window-sized cache could not be rewound anyway (profiles/ort_genai_0_18.py, sliding_kv_cache).
    return (f"1 sliding-window layer (window {attention.window}{', sinks' * attention.sinks} in the graph; its KV "
            "cache holds the whole context)")


def _project(main: DecoderConfig, ir: ModelIR, *, filename: str, inputs: dict, outputs: dict, contract) -> DecoderConfig:
    if main.attention is not AttentionMode.DENSE:
        raise AssertionError("MtpHeadProjection runs before PagedIoRewrite, on a dense main decoder")
    arch = ir.architecture
    if min(arch.num_key_value_heads, arch.head_dim, main.hidden_size) <= 0:
        raise AssertionError("the head needs positive KV heads, head size and hidden size")
    if ".." in filename.split("/") or filename.startswith("/"):
        raise AssertionError(f"head filename must be relative without '..': {filename}")
    return replace(
        main,
        filename=filename,
        layer_kinds=(LayerKind.FULL_ATTENTION,),
        # One attention layer of the head's own geometry (Qwen3.5's: the main model's full attention; Step's: sliding).
        num_key_value_heads=arch.attention_at(None).num_key_value_heads,
        head_size=arch.attention_at(None).cached_head_dim,
        inputs=tuple(inputs.items()),
        outputs=tuple(outputs.items()),
        contract=contract,
        shared_initializers=(),
        state_groups=(),
        sliding_window=None,
        conv_kernel=0,
        attention=AttentionMode.DENSE,
    )


def _ort_head(ir: ModelIR) -> DecoderConfig:
    return _project(
        ir.main,
        ir,
        filename=ORT_HEAD_FILENAME,
        inputs=dict(ORT_HEAD_INPUT_NAMES),
        outputs=dict(ORT_HEAD_OUTPUT_NAMES),
        contract=ort_head_contract(ir.architecture, ir.precision),
    )


def _onnx_genai_head(ir: ModelIR) -> DecoderConfig:
    return _project(
        ir.main,
        ir,
        filename=ONNX_GENAI_HEAD_FILENAME,
        inputs=dict(ONNX_GENAI_HEAD_INPUT_NAMES),
        outputs=dict(ONNX_GENAI_HEAD_OUTPUT_NAMES),
        contract=onnx_genai_head_contract(ir.architecture, ir.precision),
    )
