"""Which main-model layers are full attention and which linear attention: one rule for every source.

A checkpoint can say it two ways: a list with one entry per layer (HF `layer_types`,
GGUF `<arch>.attention.recurrent_layers`) or Qwen3.5's interval (layer i is full
attention iff `(i + 1) % interval == 0`). The list is authoritative, as in
transformers and llama.cpp's loader; the interval is the fallback.

When both are written and disagree the file contradicts itself, and we refuse it
naming both keys, with one exception: llama.cpp's converter writes the GGUF
interval as 4 whenever the HF config has no `full_attention_interval` key (it only
has `layer_types`), so next to a list, a GGUF interval of 4 says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..util.diagnostics import SourceError
from ..ir import LayerKind, hybrid_layer_kinds

# Qwen3.5's default interval (transformers' config and llama.cpp's converter agree).
DEFAULT_INTERVAL = 4
# What llama.cpp's converter writes as the GGUF interval when the HF config lacks the key.
CONVERTER_PLACEHOLDER_INTERVAL = 4


@dataclass(frozen=True)
class Declared:
    """A value as the checkpoint wrote it, with the key that names it in messages."""

    key: str
    value: object


def layer_kinds(
    where: str,
    num_layers: int,
    *,
    per_layer: Declared | None,
    interval: Declared | None,
    placeholder_interval: int | None = None,
) -> tuple[LayerKind, ...]:
    """The kinds of the first `num_layers` layers.

    `per_layer.value` is a sequence of `LayerKind` already parsed by the source (it may
    be longer than `num_layers`: a GGUF list also covers the MTP block). An interval equal
    to `placeholder_interval` is not held against a disagreeing list (see the module doc).
    """
    from_interval = None
    if interval is not None:
        value = interval.value
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SourceError(f"{where}: {interval.key} must be a positive integer, not {value!r}")
        from_interval = hybrid_layer_kinds(num_layers, value)
    if per_layer is None:
        return from_interval or hybrid_layer_kinds(num_layers, DEFAULT_INTERVAL)
    listed = tuple(per_layer.value)[:num_layers]  # type: ignore[arg-type]
    if len(listed) < num_layers:
        raise SourceError(
            f"{where}: {per_layer.key} lists {len(tuple(per_layer.value))} layers, "  # type: ignore[arg-type]
            f"expected one per layer ({num_layers})"
        )
    if from_interval is not None and from_interval != listed and interval.value != placeholder_interval:
        raise SourceError(
            f"{where}: {per_layer.key} and {interval.key} disagree: {per_layer.key} makes layers "
            f"{_full_layers(listed)} full attention, {interval.key} = {interval.value} makes layers "
            f"{_full_layers(from_interval)} full attention; fix or remove one of them"
        )
    return listed


def _full_layers(kinds: tuple[LayerKind, ...]) -> list[int]:
    return [i for i, kind in enumerate(kinds) if kind is LayerKind.FULL_ATTENTION]
