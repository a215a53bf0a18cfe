"""The quantization recipes bench/quant_error.py compares, each as the `quantization` section of an mtpc spec.

Mixed recipes promote "quantization-sensitive" weights to more bits. Where another tool's rule
asks for a width MatMulNBits does not have (6 bits), the next one up (8) stands in, so those rows
are a little more accurate and larger than the tool's own files would be:

- **builder mixed_layers**: onnxruntime-genai 0.18.0's model builder, `matmul_mixed_precision`
  selector `mixed_layers` (`models/builders/base.py`, `make_matmul_mixed_precision`): in layers
  i < L/8, i >= 7L/8 or (i - round(L/8)) % 3 == 2, the attention's q/k/v and the MLP's down
  projection in int8 (a linear-attention layer has no `attn/qkv_proj`: only its down projection);
  `+ last_matmul` adds the LM head in int8, as its `k_quant_mixed` preset does.
- **mlx-lm mixed_4_6**: ml-explore/mlx-lm `mlx_lm/convert.py` (`mixed_quant_predicate_builder`,
  commit 04494c99): 4-bit affine groups of 64 for every quantizable module (the embedding
  included), 6 bits for `v_proj` and `down_proj` in layers i < L//8, i >= 7L//8 or
  (i - L//8) % 3 == 2, and for the LM head. Affine is scale and bias per group: `symmetric: false`.
- **Q4_K_M choices**: what llama.cpp's `llama-quantize ... Q4_K_M` chose for each tensor of this very
  model (read from its file through `mtpc`'s own `keep: source` package's quantization.json), each
  type given its nearest ONNX encoding: Q4_K as asymmetric int4 blocks of 32 (its sub-blocks),
  Q5_K as asymmetric int8 blocks of 32, Q6_K as int8 blocks of 16, Q8_0 as int8 blocks of 32, float
  as float.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench.trained_model import FOLDER, compile_package, gguf

HEAD_OFF = "mtp: {head: off}\ntargets:\n  onnxruntime_genai: {execution_provider: cpu, state_window: off}\n"


@dataclass(frozen=True)
class Recipe:
    quantization: Callable[[Path], str]  # the `quantization:` section, given the work folder
    source: Callable[[Path], str] | None = None  # the spec's source value, when not the checkpoint's folder


def _layers() -> int:
    return json.loads((FOLDER / "config.json").read_text())["num_hidden_layers"]


def _attention(i: int) -> bool:
    return json.loads((FOLDER / "config.json").read_text())["layer_types"][i] == "full_attention"


def _section(default: str, overrides: list[str]) -> str:
    lines = ["quantization:", f"  default: {default}"]
    if overrides:
        lines.append("  overrides:")
        lines += [f"    - {o}" for o in overrides]
    return "\n".join(lines) + "\n"


def builder_mixed_layers(last_matmul: bool) -> str:
    n = _layers()
    promoted = [i for i in range(n) if i < n / 8 or i >= 7 * n / 8 or (i - round(n / 8)) % 3 == 2]
    overrides = ["{match: lm_head.weight, bits: 8}"] if last_matmul else []
    for i in promoted:
        if _attention(i):
            overrides.append(f"{{match: 'layers.{i}.self_attn.[qkv]_proj.weight', bits: 8}}")
        overrides.append(f"{{match: layers.{i}.mlp.down_proj.weight, bits: 8}}")
    return _section("{bits: 4, block_size: 32}", overrides)


def mlx_mixed_4_6() -> str:
    n = _layers()
    more = [i for i in range(n) if i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2]
    high = "bits: 8, block_size: 64, symmetric: false"
    overrides = [f"{{match: lm_head.weight, {high}}}"]
    for i in more:
        if _attention(i):
            overrides.append(f"{{match: layers.{i}.self_attn.v_proj.weight, {high}}}")
        overrides.append(f"{{match: layers.{i}.mlp.down_proj.weight, {high}}}")
    overrides.append("{match: embed_tokens.weight, bits: 4, block_size: 64, symmetric: false}")
    return _section("{bits: 4, block_size: 64, symmetric: false}", overrides)


# llama.cpp type -> the ONNX encoding that stands for it.
_ENCODING = {
    "Q4_K": "bits: 4, block_size: 32, symmetric: false",
    "Q5_K": "bits: 8, block_size: 32, symmetric: false",
    "Q6_K": "bits: 8, block_size: 16",
    "Q8_0": "bits: 8, block_size: 32",
}


def q4_k_m_choices(work: Path) -> str:
    kept = compile_package(work, "q-llama-q4_k_m-kept", _section("{keep: source}", []) + HEAD_OFF,
                           source=f"{{gguf: {gguf(work, 'Q4_K_M')}}}")
    entries = json.loads((kept / "quantization.json").read_text())["weights"]
    overrides = []
    for entry in entries:
        source = entry["source"].upper()
        if entry["role"] not in ("linear", "embedding") or entry["name"].startswith("mtp."):
            continue
        encoding = _ENCODING.get(source, "bits: null")
        overrides.append(f"{{match: {entry['name']}, {encoding}}}")
    if not overrides:
        sys.exit(f"no quantized weight in {kept / 'quantization.json'}")
    return _section("{bits: 4, block_size: 32, symmetric: false}", overrides)


def _gguf_source(kind: str) -> Callable[[Path], str]:
    return lambda work: f"{{gguf: {gguf(work, kind)}}}"


def _plain(default: str) -> Recipe:
    return Recipe(lambda work: _section(default, []))


RECIPES: dict[str, Recipe] = {
    "float32 package": _plain("{bits: null}"),
    "int8 acc0": _plain("{bits: 8, block_size: 32, accuracy_level: 0}"),
    "int8 acc4": _plain("{bits: 8, block_size: 32, accuracy_level: 4}"),
    **{f"int4 RTN b{b} acc{a}": _plain(f"{{bits: 4, block_size: {b}, accuracy_level: {a}}}")
       for b in (32, 64, 128) for a in (0, 4)},
    "builder mixed_layers": Recipe(lambda work: builder_mixed_layers(False)),
    "builder mixed_layers + last_matmul": Recipe(lambda work: builder_mixed_layers(True)),
    "mlx-lm mixed_4_6": Recipe(lambda work: mlx_mixed_4_6()),
    "Q4_K_M choices as ONNX encodings": Recipe(q4_k_m_choices),
    # mtpc's named recipe (weights/presets.py): the same choices, Q4_K's blocks fitted by Q4_K's own search.
    "preset q4_k_m": _plain("{preset: q4_k_m}"),
    "preset q4_k_m acc0": _plain("{preset: q4_k_m, accuracy_level: 0}"),
    "llama.cpp Q4_K_M (kept)": Recipe(lambda work: _section("{keep: source}", []), _gguf_source("Q4_K_M")),
    "llama.cpp Q4_K_M (kept) acc0": Recipe(lambda work: _section("{keep: source, accuracy_level: 0}", []),
                                                  _gguf_source("Q4_K_M")),
    "llama.cpp Q4_0 (kept)": Recipe(lambda work: _section("{keep: source}", []), _gguf_source("Q4_0")),
}


def recipe_body(name: str, work: Path) -> str:
    """The spec lines after `source` for recipe `name`: its quantization, no head, onnxruntime-genai on CPU."""
    return RECIPES[name].quantization(work) + HEAD_OFF
