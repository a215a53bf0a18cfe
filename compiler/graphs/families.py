"""Which graph blocks each model family uses: its main decoder builder and its attention block.

The MTP head graph (`mtp_head.py`) and the emitter are family-neutral; they ask here. A new family
adds its blocks file (like `glm4moe.py`) and a row below.
"""

from __future__ import annotations

from typing import Callable

from ..ir import Architecture
from . import deepseek2, glm4moe, qwen35, step35
from .blocks import gated_attention

_MAIN = {"qwen35": qwen35.build_main, "qwen35moe": qwen35.build_main, "glm4moe": glm4moe.build_main,
         "qwen3next": qwen35.build_main, "deepseek2": deepseek2.build_main, "step35": step35.build_main}
_ATTENTION = {"qwen35": gated_attention, "qwen35moe": gated_attention, "glm4moe": glm4moe.attention,
              "qwen3next": gated_attention, "deepseek2": deepseek2.attention, "step35": step35.attention}


def _of(table: dict, arch: Architecture):
    found = table.get(arch.family)
    if found is None:
        raise AssertionError(f"no graph blocks for model family {arch.family!r}")
    return found


def main_builder(arch: Architecture) -> Callable:
    """`build_main(ir, params, data, progress, kernels) -> BuiltGraph` of `arch`'s family."""
    return _of(_MAIN, arch)


def attention_block(arch: Architecture) -> Callable:
    """The full-attention mixer of `arch`'s family: `(b, ops, x, prefix, arch, rot, past_key, past_value)`."""
    return _of(_ATTENTION, arch)
