"""GGUF metadata -> Architecture: the keys llama.cpp's converter writes for Qwen3.5.

Sizes come from `<arch>.*` keys; the layer layout from `layer_layout` (the
converter's `recurrent_layers` first); the vocabulary size from the embedding's
shape. Nothing here reads tensor data.
"""

from __future__ import annotations

import numpy as np
from gguf import Keys

from ..diagnostics import SourceError
from ..ir import Architecture, LayerKind, LinearAttentionDims, Rope, TokenIds
from .gguf_header import GGUFHeader
from .gguf_names import GGUFNames
from .layer_layout import CONVERTER_PLACEHOLDER_INTERVAL, Declared, layer_kinds


class Metadata:
    def __init__(self, header: GGUFHeader, path: str):
        self.header = header
        self.path = path
        self.arch = self.get("general.architecture")

    def get(self, key: str, default=None, *, required: bool = True):
        value = self.header.metadata.get(key.format(arch=getattr(self, "arch", "")))
        if value is None:
            if required and default is None:
                raise SourceError(f"{self.path}: GGUF metadata key {key.format(arch=self.arch)!r} is missing")
            return default
        return value

    def uniform(self, key: str) -> int:
        """A size that may be written per layer; we support only one value across layers."""
        value = self.get(key)
        if isinstance(value, list):
            distinct = sorted({int(v) for v in value if int(v) != 0})
            if len(distinct) != 1:
                raise SourceError(
                    f"{self.path}: {key.format(arch=self.arch)} differs per layer ({distinct}), which mtpc does not support"
                )
            return distinct[0]
        return int(value)


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`gguf._layout` judges the head) and the trunk size."""
    header = meta.header
    block_count = int(meta.get(Keys.LLM.BLOCK_COUNT))
    nextn = int(meta.get(Keys.LLM.NEXTN_PREDICT_LAYERS, 0, required=False))
    if not 0 <= nextn < block_count:
        raise SourceError(f"{meta.path}: nextn_predict_layers {nextn} does not fit block_count {block_count}")
    n_main = block_count - nextn
    kinds = _layer_kinds(meta, block_count, n_main)
    head_dim = int(meta.get(Keys.Attention.KEY_LENGTH))
    rotary = int(meta.get(Keys.Rope.DIMENSION_COUNT, head_dim, required=False))
    sections = [int(s) for s in meta.get(Keys.Rope.DIMENSION_SECTIONS, [], required=False)]
    while sections and sections[-1] == 0:  # the converter pads (T, H, W) to four entries
        sections.pop()
    group_count = int(meta.get(Keys.SSM.GROUP_COUNT))
    value_heads = int(meta.get(Keys.SSM.TIME_STEP_RANK))
    inner = int(meta.get(Keys.SSM.INNER_SIZE))
    if value_heads <= 0 or inner % value_heads or value_heads % group_count:
        raise SourceError(
            f"{meta.path}: inconsistent ssm sizes (inner_size {inner}, time_step_rank {value_heads}, "
            f"group_count {group_count})"
        )
    embd = tensor_shapes(header).get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    eos = int(meta.get(Keys.Tokenizer.EOS_ID, 0, required=False))
    eot = meta.get(Keys.Tokenizer.EOT_ID, None, required=False)
    eos_ids = (eos,) if eot is None or int(eot) == eos else (eos, int(eot))
    arch = Architecture(
        family=names.family,
        hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=meta.uniform(Keys.LLM.FEED_FORWARD_LENGTH),
        num_attention_heads=meta.uniform(Keys.Attention.HEAD_COUNT),
        num_key_value_heads=meta.uniform(Keys.Attention.HEAD_COUNT_KV),
        head_dim=head_dim,
        vocab_size=int(embd[0]),
        layer_kinds=kinds,
        rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_RMS_EPS)),
        rope=Rope(
            theta=_float32(meta.get(Keys.Rope.FREQ_BASE)),
            partial_rotary_factor=rotary / head_dim,
            head_dim=head_dim,
            mrope_section=tuple(sections),
        ),
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)),
        tokens=TokenIds(
            bos=int(meta.get(Keys.Tokenizer.BOS_ID, eos, required=False)),
            eos=eos_ids,
            pad=int(meta.get(Keys.Tokenizer.PAD_ID, eos, required=False)),
        ),
        linear_attention=LinearAttentionDims(
            num_key_heads=group_count,
            key_head_dim=int(meta.get(Keys.SSM.STATE_SIZE)),
            num_value_heads=value_heads,
            value_head_dim=inner // value_heads,
            conv_kernel=int(meta.get(Keys.SSM.CONV_KERNEL)),
        ),
        tie_word_embeddings="output.weight" not in tensor_shapes(header),
        mtp_num_layers=nextn,
    )
    return arch, n_main


# Not in every gguf-py release's `Keys` yet: llama.cpp's converter writes it from HF `layer_types`.
RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"


def _layer_kinds(meta: Metadata, block_count: int, n_main: int) -> tuple[LayerKind, ...]:
    """The trunk's layer kinds: `recurrent_layers` (one bool per block, MTP blocks included) first."""
    per_layer = interval = None
    recurrent = meta.get(RECURRENT_LAYERS, required=False)
    key = RECURRENT_LAYERS.format(arch=meta.arch)
    if recurrent is not None:
        if not isinstance(recurrent, list) or any(isinstance(v, (str, list, float)) or v not in (0, 1) for v in recurrent):
            raise SourceError(f"{meta.path}: {key} must be an array of booleans (or 0/1), one per block")
        if len(recurrent) != block_count:
            raise SourceError(
                f"{meta.path}: {key} has {len(recurrent)} entries, expected one per block ({block_count}, "
                f"the MTP block included)"
            )
        if any(recurrent[n_main:]):
            raise SourceError(f"{meta.path}: {key} marks an MTP block as recurrent; an MTP block is full attention")
        kinds = tuple(LayerKind.LINEAR_ATTENTION if v else LayerKind.FULL_ATTENTION for v in recurrent)
        per_layer = Declared(key, kinds)
    written = meta.get(Keys.LLM.FULL_ATTENTION_INTERVAL, required=False)
    if written is not None:
        interval = Declared(Keys.LLM.FULL_ATTENTION_INTERVAL.format(arch=meta.arch), written)
    return layer_kinds(
        meta.path, n_main, per_layer=per_layer, interval=interval, placeholder_interval=CONVERTER_PLACEHOLDER_INTERVAL
    )


def _float32(value) -> float:
    """GGUF stores these as FLOAT32: take the shortest decimal that round-trips (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value)))


def tensor_shapes(header: GGUFHeader) -> dict[str, tuple[int, ...]]:
    return {name: info.shape for name, info in header.tensors.items()}
