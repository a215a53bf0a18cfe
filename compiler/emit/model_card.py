"""A short README.md for the package: what it is, what is in it, how to run and check it.

Written from the IR and what the source states about itself (its Hugging Face repo and
license, see sources/card_facts.py), with nothing that varies between runs (no dates,
no absolute paths), so a package stays byte-identical when recompiled. It opens with
Hugging Face front matter, so the Hub files the package under its base model, library
and task once it is uploaded.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from ..ir import AttentionMode, HeadContract, HeadLayout, LayerKind, ModelIR
from ..profiles import ort_genai_profile
from ..profiles.onnx_genai import PROFILE as ONNX_GENAI
from ..weights.quant import requantization_notes
from .artifact import Artifact, EmitContext
from .model_card_vision import file_lines, model_lines, run_section
from .speed_table import SpeedTable, render_speed_section

CARD_NAME = "README.md"
# The third line after the front matter starts with this; `mtpc.output.write` recognises an earlier package by it.
CARD_SIGNATURE = "A runtime package compiled by mtpc from a "


def _weights(ir: ModelIR) -> str:
    q = ir.quantization.default
    if q.keep_source:
        text = "stored as in the source"
    elif q.bits is None:
        text = f"{ir.precision.io_dtype}"
    else:
        text = f"int{q.bits}, block size {q.block_size} (MatMulNBits)"
    if ir.quantization.overrides:
        text += f"; {len(ir.quantization.overrides)} override(s) in the spec"
    return text


# Hugging Face's name for ONNX models (huggingface.co/models?library=onnx); the runtimes are tags.
LIBRARY_NAME = "onnx"
PIPELINE_TAG = "text-generation"
VISION_PIPELINE_TAG = "image-text-to-text"  # a package that takes images (`ModelIR.vision`)


def front_matter(ir: ModelIR, facts: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The YAML block the Hub reads: base model and license where the source states them, library, task, tags."""
    known = dict(facts)
    tags = ["onnx", "mtpc", ir.architecture.family]
    if ir.targets.onnxruntime_genai is not None:
        tags.append("onnxruntime-genai")
    if ir.targets.onnx_genai is not None:
        tags.append("onnx-genai")
    if ir.heads:
        tags += ["mtp", "speculative-decoding"]
    if any(w.form is not None for w in ir.weights):
        tags.append("quantized")
    lines = ["---"]
    lines += [f"{key}: {_scalar(known[key])}" for key in ("base_model", "license") if key in known]
    task = VISION_PIPELINE_TAG if ir.vision is not None else PIPELINE_TAG
    lines += [f"library_name: {LIBRARY_NAME}", f"pipeline_tag: {task}", "tags:"]
    lines += [f"- {_scalar(tag)}" for tag in dict.fromkeys(tags)]
    return lines + ["---", ""]


def _scalar(text: str) -> str:
    """`text` as a YAML scalar that reads back as this string: bare when plainly a name, else quoted."""
    if _PLAIN.fullmatch(text) and not _NOT_A_STRING.fullmatch(text):
        return text
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


_PLAIN = re.compile(r"[A-Za-z][\w./-]*")
# Words YAML 1.1 (PyYAML, the Hub's parsers) would read as booleans or null.
_NOT_A_STRING = re.compile(r"(?i)(y|n|yes|no|true|false|on|off|null|none)")


def render(ir: ModelIR, facts: tuple[tuple[str, str], ...] = (), speed: SpeedTable | None = None) -> str:
    """The card; `speed` (a `mtpc tune` report, `compile --tune-report`) adds the measured decoding speed."""
    arch = ir.architecture
    ort_head = ir.head(HeadContract.ORT_GENAI)
    onnx_genai_head = ir.head(HeadContract.ONNX_GENAI)
    has_head = bool(ir.heads)
    lines = front_matter(ir, facts) + [
        f"# {ir.name}",
        "",
        f"{CARD_SIGNATURE}{arch.family} checkpoint ({ir.source.kind} source)"
        + (", with its multi-token-prediction (MTP) head for self-speculative decoding." if has_head else ", text only."),
        "",
        "## Model",
        "",
        f"- {arch.num_layers} layers: {arch.layer_kind_summary()}",
        f"- hidden size {arch.hidden_size}, {arch.num_attention_heads} attention heads, "
        + (f"one KV head of {arch.head_dim}: the latent each layer caches" if arch.mla is not None
           else f"{arch.num_key_value_heads} KV heads, head dim {arch.head_dim}"),
        *([f"- {arch.attention_summary()}"] if not arch.attention_output_gate else []),
        *_kv_cache(ir),
        *_sliding_cache(ir),
        *([f"- {arch.mamba.summary()}"] if arch.mamba is not None else []),
        *([f"- mixture of experts{' in every layer' if not arch.moe.dense_layers and not arch.separate_ffn_layers else ''}: "
           f"{arch.moe.summary()}"] if arch.moe is not None else []),
        *([f"- MTP head in the source: {arch.head_summary()}"]
          if has_head and arch.head_layout is not HeadLayout.MTP_MODULE else []),
        *_chained_heads(ir),
        *model_lines(ir),
        f"- vocabulary {arch.vocab_size}, context length {arch.context_length}",
        f"- I/O dtype {ir.precision.io_dtype}, logits {ir.precision.effective_logits_dtype}; weights {_weights(ir)}",
        "",
        "## Files",
        "",
        f"- `{ir.main.filename}` (+ `.data`): the main decoder" + _window(ir),
    ]
    if ir.onnx_genai_main is not None:
        lines.append(f"- `{ir.onnx_genai_main.filename}`: the same decoder without the state window, for onnx-genai "
                     f"(it reads `{ir.main.filename}.data`)")
    if ir.targets.onnxruntime_genai is not None:
        lines.append("- `genai_config.json`: onnxruntime-genai configuration"
                     + (" (its multimodal pipeline)" if ir.vision is not None else "")
                     + (" with its `model.mtp` section" if ort_head else ""))
    lines += file_lines(ir)
    if ort_head is not None:
        lines.append(f"- `{ort_head.filename}` (+ `.data`) and the `genai_config.json` beside it: the MTP head as a model of its own folder"
                     + _draft_head(ir))
    if ir.targets.onnx_genai is not None:
        lines.append(f"- `inference_metadata.yaml`: onnx-genai metadata ({ir.targets.onnx_genai.layout} layout, "
                     f"checked against onnx-genai {ONNX_GENAI.commit[:7]})")
    if onnx_genai_head is not None:
        lines.append(f"- `{onnx_genai_head.filename}` (+ `.data`): the MTP head for onnx-genai, declared in "
                     "`config.json` (`speculator_config`)")
    lines.append("- `quantization.json`: how each weight is stored, and the spec rule that chose it")
    lines.append("- `manifest.json`: every other file with its size and sha256, as written")
    ort_target = ir.targets.onnxruntime_genai
    if ort_target is not None and ort_target.attention is AttentionMode.PAGED:
        # A paged package is driven by onnxruntime-genai's paged engine on its execution provider;
        # the Generator / MtpGenerator loop below is the dense path and is not what runs it.
        lines += [
            "",
            "## Run with onnxruntime-genai",
            "",
            f"This package uses paged attention on the `{ort_target.execution_provider}` execution provider: "
            "onnxruntime-genai's paged engine (`og.Engine`) schedules its requests"
            + (", drafting with the head named in `model.mtp`." if ort_head is not None else "."),
            "It cannot run on a CPU; mtpc's README says what has been verified for paged packages.",
        ]
    elif ort_target is not None and ir.vision is not None:
        lines += run_section(ir)
    elif ort_target is not None:
        lines += [
            "",
            "## Run with onnxruntime-genai",
            "",
            "```python",
            "import onnxruntime_genai as og",
            "",
            'model = og.Model(".")',
            "params = og.GeneratorParams(model)",
            "params.set_search_options(max_length=64, do_sample=False)",
        ]
        if ort_head is not None:
            head_dir = ort_head.filename.rsplit("/", 1)[0] if "/" in ort_head.filename else "."
            lines += [
                f"params.set_speculative_options(max_draft_tokens={ir.targets.onnxruntime_genai.max_draft_tokens})",
                "# og.Generator(model, params) decodes without drafting; the tokens are the same.",
                f'generator = og.MtpGenerator(model, og.Model("{head_dir}"), params)',
            ]
            sequence = "generator.get_sequence()"
        else:
            lines.append("generator = og.Generator(model, params)")
            sequence = "generator.get_sequence(0)"
        lines += [
            "generator.append_tokens(prompt_token_ids)",
            "while not generator.is_done():",
            "    generator.generate_next_token()",
            f"print({sequence})",
            "```",
        ]
    if speed is not None:
        lines += render_speed_section(speed)
    lines += _onnx_genai_section(ir, onnx_genai_head)
    lines += _weights_section(ir)
    lines += [
        "",
        "## Check",
        "",
        "```sh",
        "mtpc check .                       # schemas, cross-file contracts, every file against manifest.json",
        "mtpc verify . --spec SPEC          # run it against the numpy reference (SPEC: the spec it was compiled from)",
        "```",
        "",
    ]
    return "\n".join(lines)


def _onnx_genai_section(ir: ModelIR, head) -> list[str]:
    if ir.targets.onnx_genai is None:
        return []
    lines = ["", "## Run with onnx-genai", "", "```sh"]
    if head is None:
        return lines + ['onnx-genai generate . "your prompt"', "```"]
    # Only Engine::from_dir on the native decode backend builds the MTP proposer (mtpc.profiles.onnx_genai).
    return lines + [
        'onnx-genai generate . "your prompt" --backend native --temperature 0',
        "```",
        "",
        "onnx-genai drafts with the head only on its native backend: an `onnx-genai` built with the "
        "`native-backend` feature, run with `--backend native` (or `ONNX_GENAI_BACKEND=native`), on greedy "
        "requests without logits processors or logprobs. Its default backend, and its Python and C APIs, "
        "load this package and decode without the head.",
    ]


def _weights_section(ir: ModelIR) -> list[str]:
    """How the weights are stored, grouped as `mtpc plan` shows them (passes/quantization.py decides)."""
    groups: Counter[tuple[str, str, str, str, str]] = Counter()
    for w in ir.weights:
        groups[(w.rule, w.role.value, w.source, w.result, "yes" if w.lossless else "no")] += 1
    lines = ["", "## Weights", "", "| rule | count | role | source | stored as | exact |", "|---|---|---|---|---|---|"]
    lines += [f"| {rule} | {n} | {role} | {src} | {result} | {exact} |" for (rule, role, src, result, exact), n in sorted(groups.items())]
    lines += [f"\n{note}" for note in requantization_notes(ir.weights)]
    return lines


def emit_model_card(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    return [Artifact(CARD_NAME, render(ir, ctx.info.card, ctx.speed_table).encode("utf-8"))]


def _kv_cache(ir: ModelIR) -> list[str]:
    """MLA's cache per token per layer against the per-head keys and values it replaces (other attentions: nothing,
    their head count and head dim say it)."""
    arch = ir.architecture
    mla = arch.mla
    if mla is None:
        return []
    size = {"float32": 4, "float16": 2, "bfloat16": 2}[ir.precision.io_dtype]
    cached, full = mla.cached_per_token * size, mla.decompressed_per_token(arch.num_attention_heads) * size
    return [f"- KV cache per token per layer: {cached:,} bytes (the {mla.latent_dim}-wide latent in the K and the V "
            f"cache, {ir.precision.io_dtype}), against {full:,} bytes for decompressed keys and values "
            f"({arch.num_attention_heads} heads x ({mla.qk_head_dim} + {mla.v_head_dim})): {full / cached:.1f}x smaller"]


def _window(ir: ModelIR) -> str:
    w = ir.main.state_window
    if not w:
        return ""
    # What the window costs a step that drafts nothing, measured by mtpc's bench/window_cost.py (issue 37 in
    # bench/README.md): the user who decodes without the head pays it too, so the card says so.
    return (f"; its linear-attention state keeps the last {w} tokens' states, so onnxruntime-genai drops a rejected "
            f"draft without running the model again (at most {w - 1} drafts a step). Every forward writes those "
            f"states, plain decoding (`og.Generator`) included: on mtpc's 348M-class bench checkpoint on one CPU "
            f"thread that cost 8 % of a plain step at float32 (W = 3 or 5), 19 % with int4 weights at W = 3 and 35 % "
            f"at W = 5; `state_window: off` removes it, and a rejected draft is then replayed")


def _draft_head(ir: ModelIR) -> str:
    """How the head's LM head differs from the main model's (`mtp.draft_vocabulary`, `mtp.lm_head: own`)."""
    vocabulary = ir.mtp.draft_vocabulary
    if vocabulary is not None:
        return (f"; its own LM head scores {len(vocabulary.ids)} of the {ir.architecture.vocab_size} tokens (ranked by "
                f"{vocabulary.ranking}), the others never drafted")
    return "; it reads its own copy of the LM head" if ir.mtp.own_lm_head else ""


# The context the card states a sequence's KV cache at.
CARD_CONTEXT = 32 * 1024


def _sliding_cache(ir: ModelIR) -> list[str]:
    """A model with sliding-window layers: its KV bytes per sequence at CARD_CONTEXT tokens, as the graphs' caches
    hold them, against a cache of the sliding layers' windows, and why the package keeps the larger one."""
    arch = ir.architecture
    if LayerKind.SLIDING_ATTENTION not in arch.layer_kinds or arch.mla is not None:
        return []
    size = {"float32": 4, "float16": 2, "bfloat16": 2}[ir.precision.io_dtype]
    layers = [arch.layer_attention(k) for k in arch.layer_kinds if k is not LayerKind.LINEAR_ATTENTION]
    if ir.heads:
        layers.append(arch.attention_at(None))
    per_token = [2 * a.cached_key_value_heads * a.cached_head_dim * size for a in layers]
    held = sum(p * CARD_CONTEXT for p in per_token)
    windowed = sum(p * a.cached_tokens(CARD_CONTEXT) for p, a in zip(per_token, layers))
    target = ir.targets.onnxruntime_genai
    why = ort_genai_profile(target.version).sliding_kv_cache if target is not None else ""
    repeated = {a.num_key_value_heads: a for a in layers if a.cached_key_value_heads > a.num_key_value_heads}.values()
    window = arch.layer_attention(LayerKind.SLIDING_ATTENTION).window
    return [f"- KV cache per sequence at {CARD_CONTEXT:,} tokens: {held / 2**20:,.0f} MiB ({ir.precision.io_dtype}; "
            f"{len(layers)} layers{' with the head' * bool(ir.heads)}). The sliding layers hold the whole context too, "
            f"their window of {window} applied in the graph" + (f", because {why}" if why else "")
            + f"; caches of the windows alone would hold {windowed / 2**20:,.0f} MiB"
            + "".join(f"; layers of {a.num_key_value_heads} KV heads cache each {a.cached_key_value_heads // a.num_key_value_heads}"
                      " times, as onnxruntime-genai sizes every layer's cache by one num_key_value_heads "
                      "(src/models/kv_cache.cpp)" for a in repeated)]


def _chained_heads(ir: ModelIR) -> list[str]:
    """What a package does with a checkpoint's several chained MTP layers (Step-3.5's three)."""
    arch = ir.architecture
    if not ir.heads or arch.mtp_chained_layers <= arch.mtp_num_layers:
        return []
    return [f"- drafts: the head is the first of the source's {arch.mtp_chained_layers} chained MTP layers, run at "
            "every draft position on its own output (onnxruntime-genai's MtpGenerator and onnx-genai drive one head "
            "graph N times and give it no draft position); the other layers, trained for positions 2 and later, are "
            "not in the package (their acceptance beside the first's: docs/chained-heads.md)"]

