"""Rules of a valid spec that JSON Schema cannot say, checked before the source is opened.

Each rule reports at the key or value that breaks it; all are checked and
reported together. A spec with schema errors still gets the rules whose
sections are schema-valid (the loader asks), so one mistake does not hide another.

What an onnxruntime-genai version accepts (execution providers, paged-attention
dtypes, block and batch sizes, draft lengths) is its runtime profile's to say
(`mtpc.profiles`); the rules here only place the profile's findings at the spec's lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet

from ..util.diagnostics import Diagnostic
from ..ir import AttentionMode
from ..profiles import ort_genai_profile
from ..profiles import onnx_genai as onnx_genai_profile
from ..profiles.ort_genai import TARGET_PATH
from ..sources import synthetic
from .synthetic_settings import synthetic_spec
from .targets import onnx_genai_target, ort_target
from .yaml_positions import dotted

if TYPE_CHECKING:
    from .loaded import LoadedSpec

# What `keep: source` decides itself; accuracy_level (how the kernel computes) combines with it.
_ENCODING_FIELDS = ("bits", "block_size", "symmetric")


def check(spec: LoadedSpec, filled: dict, *, skip: AbstractSet[str] = frozenset()) -> list[Diagnostic]:
    """`filled` is `spec.data` with the schema defaults applied.

    `skip`: top-level sections with schema errors; a rule reading any of them is
    not run, since it may assume what the schema guarantees.
    """
    rules = (
        ({"quantization"}, lambda: _quantization(spec)),
        ({"precision", "targets"}, lambda: _bfloat16_without_ort_cuda(spec, filled)),
        ({"targets", "precision"}, lambda: _onnxruntime_genai(spec, filled)),
        ({"targets"}, lambda: _onnx_genai(spec, filled)),
        ({"source"}, lambda: _synthetic(spec, filled)),
        ({"mtp", "targets"}, lambda: _draft_options(spec, filled)),
    )
    return [finding for reads, rule in rules if not reads & skip for finding in rule()]


def _power_of_two_block(spec: LoadedSpec, path: tuple) -> list[Diagnostic]:
    # MatMulNBits' block sizes (a kernel fact, not a runtime version's); the schema bounds them at 256.
    size = spec.get(path)
    if size is None or (size >= 16 and size & (size - 1) == 0):
        return []
    return [spec.diagnostic(path, f"{dotted(path)} must be a power of two from 16 to 256 (16, 32, 64, 128, 256), not {size}")]


def _quantization(spec: LoadedSpec) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    default_keeps = spec.get(("quantization", "default", "keep")) == "source"
    schemes = [("quantization", "default")]
    schemes += [("quantization", "overrides", i) for i in range(len(spec.get(("quantization", "overrides"), [])))]
    for scheme in schemes:
        out += _power_of_two_block(spec, scheme + ("block_size",))
        written = spec.get(scheme, {})
        if "preset" in written:
            out += [
                spec.diagnostic(
                    scheme + (name,),
                    f"'{name}' cannot be set together with 'preset'",
                    at="key",
                    hint=f"the preset {written['preset']} decides every weight's encoding; give a weight another with "
                         "an override, or drop the preset",
                )
                for name in (*_ENCODING_FIELDS, "keep")
                if name in written
            ]
        elif written.get("keep") == "source":
            out += [
                spec.diagnostic(
                    scheme + (name,),
                    f"'{name}' cannot be set together with 'keep: source'",
                    at="key",
                    hint="keep: source stores the weights as the source has them; drop one of the two",
                )
                for name in _ENCODING_FIELDS
                if name in written
            ]
        elif default_keeps and scheme[1] == "overrides" and "bits" not in written and "block_size" in written:
            out.append(
                spec.diagnostic(
                    scheme,
                    "this override sets block_size without 'bits' (or 'keep'): the default keeps the source's"
                    " encoding, so there are no bits to inherit",
                    at="key",
                )
            )
    return out


def _bfloat16_without_ort_cuda(spec: LoadedSpec, filled: dict) -> list[Diagnostic]:
    """bfloat16 graphs need an execution provider with bfloat16 kernels; only an onnxruntime_genai
    target names one (its own profile checks which), and onnx-genai's runtime is not ours to choose.

    One mistake, one error, where the spec has it: with targets or an execution provider left to
    their defaults, the only value written is io_dtype, so every reason is said there, together
    (the profile's finding about the default provider is left to this rule)."""
    if filled["precision"]["io_dtype"] != "bfloat16":
        return []
    where = ("precision", "io_dtype")
    ort, onnx_genai = filled["targets"].get("onnxruntime_genai"), filled["targets"].get("onnx_genai")
    if ort is None:
        return [spec.diagnostic(where, "precision.io_dtype 'bfloat16' needs an onnxruntime_genai target on cuda",
                                hint="use io_dtype float16 or float32")]
    reasons = []
    default_provider = spec.get(TARGET_PATH + ("execution_provider",)) is None
    if default_provider and any(p.cause == where for p in _profile_problems(ort, "bfloat16")):
        reasons.append(f"onnxruntime_genai runs on {ort['execution_provider']} (its default execution_provider), "
                       "which has no bfloat16 kernels for these graphs")
    if onnx_genai is not None:
        reasons.append("onnx_genai's execution provider is not the spec's to choose, and CPU has none either"
                       if reasons else "its execution provider is not chosen by the spec, and CPU has no bfloat16 kernels")
    if not reasons:
        return []
    if not default_provider:  # written cuda (or another provider, which its own finding names): onnx_genai alone is in the way
        return [spec.diagnostic(where, "precision.io_dtype 'bfloat16' cannot be built with an onnx_genai target: " + reasons[0],
                                hint="drop the onnx_genai target, or use io_dtype float16")]
    written = spec.get(("targets",)) is not None
    for_what = "these targets" if written else "the default targets"
    cure = ("set targets.onnxruntime_genai.execution_provider: cuda" + (" and drop the onnx_genai target" if onnx_genai else "")
            if written else "build for CUDA alone: targets: {onnxruntime_genai: {execution_provider: cuda}}")
    return [spec.diagnostic(where, f"precision.io_dtype 'bfloat16' cannot be built for {for_what}: " + "; ".join(reasons),
                            hint=f"use io_dtype float16 (or float32), or {cure}")]


def _profile_problems(written: dict, io_dtype: str):
    target = ort_target(written)
    return ort_genai_profile(target.version).target_problems(target, io_dtype)


def _onnxruntime_genai(spec: LoadedSpec, filled: dict) -> list[Diagnostic]:
    at = TARGET_PATH
    written = filled.get("targets", {}).get("onnxruntime_genai")
    if written is None:
        return []
    target = ort_target(written)
    profile = ort_genai_profile(target.version)
    out = [
        spec.diagnostic(at + problem.key, problem.message, hint=problem.hint, at=problem.at)
        for problem in profile.target_problems(target, filled["precision"]["io_dtype"])
        # A default the spec does not write, wrong only because of a value it does: reported there, by that value's rule.
        if problem.cause is None or spec.get(at + problem.key) is not None
    ]
    if target.attention is AttentionMode.PAGED:
        if spec.get(("targets", "onnx_genai")) is not None:
            out.append(
                spec.diagnostic(
                    ("targets", "onnx_genai"),
                    "the onnx_genai target cannot share a paged main decoder",
                    at="key",
                    hint="onnx-genai runs the main graph with dense past/present ports; "
                    "build it from a spec with attention: dense, or drop the onnx_genai target",
                )
            )
    elif spec.get(at + ("paged",)) is not None:
        out.append(
            spec.diagnostic(
                at + ("paged",),
                "paged settings are given but attention is 'dense'",
                at="key",
                hint="set attention: paged, or remove the paged block",
            )
        )
    return out


def _onnx_genai(spec: LoadedSpec, filled: dict) -> list[Diagnostic]:
    written = filled.get("targets", {}).get("onnx_genai")
    if written is None:
        return []
    at = onnx_genai_profile.TARGET_PATH
    return [
        spec.diagnostic(at + problem.key, problem.message, hint=problem.hint)
        for problem in onnx_genai_profile.PROFILE.target_problems(onnx_genai_target(written))
    ]


def _draft_options(spec: LoadedSpec, filled: dict) -> list[Diagnostic]:
    """The draft-side options shape the onnxruntime-genai head's LM head: they need that head."""
    mtp = filled["mtp"]
    written = [key for key in ("draft_vocabulary", "lm_head") if key in mtp]
    if not written:
        return []
    first = ("mtp", written[0])
    if mtp["head"] == "off":
        return [spec.diagnostic(first, f"mtp.{written[0]} shapes the MTP head, but mtp.head is 'off'", at="key",
                                hint="drop it, or set mtp.head to 'auto' or 'on'")]
    if filled["targets"].get("onnxruntime_genai") is None:
        return [spec.diagnostic(first, f"mtp.{written[0]} shapes the onnxruntime-genai head's LM head, and there is no "
                                "onnxruntime_genai target", at="key",
                                hint="onnx-genai's sidecar applies the main model's LM head itself; drop the option "
                                "or add an onnxruntime_genai target")]
    if mtp.get("lm_head") == "shared" and "draft_vocabulary" in mtp:
        return [spec.diagnostic(("mtp", "lm_head"), "a draft_vocabulary needs the head's own LM-head rows, "
                                "so mtp.lm_head cannot be 'shared'", hint="drop mtp.lm_head (it is then 'own')")]
    return []


def _synthetic(spec: LoadedSpec, filled: dict) -> list[Diagnostic]:
    settings = filled.get("source", {}).get("synthetic")  # a missing source is the schema's finding
    if settings is None:
        return []
    if "revision" in filled["source"]:
        return [spec.diagnostic(("source", "revision"), "source.revision names a revision of a repo on the Hugging "
                                "Face Hub; a synthetic source has none", at="key", hint="drop source.revision")]
    at = ("source", "synthetic")
    built = synthetic_spec(settings)
    found = synthetic.problems(built)
    found += _family_keys(spec, at, settings["architecture"])
    out = [spec.diagnostic(at + where, f"{dotted(at)}: {message}") for where, message in found]
    weights = synthetic_weight_count(built.architecture)
    if weights > MAX_SYNTHETIC_WEIGHTS:
        out.append(
            spec.diagnostic(
                at,
                f"{dotted(at)} would make about {weights:,} weights ({weights * 4 / 2**30:,.1f} GiB of float32), "
                f"more than the {MAX_SYNTHETIC_WEIGHTS:,} a synthetic model may hold",
                at="key",
                hint="synthetic weights are made in memory, for tests and demos; use smaller sizes, "
                "or compile a real checkpoint (hf or gguf), whose weights are streamed",
            )
        )
    return out


# Settings that only some synthetic families have: (path under source.synthetic, the families, what it is).
_FAMILY_KEYS = (
    (("moe",), ("qwen35moe", "glm4moe"), "moe sizes a sparse FFN, which only architecture: qwen35moe and glm4moe have"),
    *((("moe", key), ("glm4moe",), f"moe.{key} is a GLM-4.5 routing setting (architecture: glm4moe)")
      for key in ("num_groups", "top_k_groups", "routed_scaling_factor", "normalize_top_k", "dense_layers")),
    (("attention_bias",), ("glm4moe",), "attention_bias is a GLM-4.5 setting (architecture: glm4moe)"),
    (("qk_norm",), ("glm4moe",), "qk_norm is a GLM-4.5 setting (architecture: glm4moe; Qwen3.5 always normalizes q and k)"),
    *(((key,), ("qwen35", "qwen35moe"), f"{key} sizes Qwen3.5's linear-attention layers; architecture: glm4moe has none")
      for key in ("linear_attention", "full_attention_interval")),
    (("rope", "mrope_section"), ("qwen35", "qwen35moe"), "mrope_section is Qwen3.5's MRoPE; GLM-4.5 rotates one position per token"),
)


def _family_keys(spec: LoadedSpec, at: tuple[str, ...], family: str) -> list[tuple[tuple[str, ...], str]]:
    """Settings given for a family that has no such thing, each reported at its key."""
    out = []
    for where, families, message in _FAMILY_KEYS:
        if family not in families and spec.get(at + where) is not None:
            if where[0] == "moe" and len(where) > 1 and family == "qwen35":
                continue  # the whole moe block is reported
            out.append((where, message))
    return out


# Synthetic weights are all made in memory at once (float32): 2^28 of them is 1 GiB.
MAX_SYNTHETIC_WEIGHTS = 1 << 28


def synthetic_weight_count(arch) -> int:
    """About how many weights a synthetic checkpoint of `arch` holds (the matrices; norms are noise)."""
    h, inter, heads, kv, hd = (
        arch.hidden_size, arch.intermediate_size, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim,
    )
    la = arch.linear_attention
    attention = h * 2 * heads * hd + 2 * h * kv * hd + heads * hd * h
    linear = 0 if la is None else (h * (la.conv_dim + la.value_dim + 2 * la.num_value_heads)
                                   + la.conv_dim * la.conv_kernel + h * la.value_dim)
    mlp = sparse = 3 * h * inter
    if arch.moe is not None:
        moe = arch.moe
        sparse = h * moe.num_experts + 3 * h * (moe.num_experts * moe.expert_intermediate_size
                                                + moe.shared_expert_intermediate_size) + h
    total = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    for i, kind in enumerate(arch.layer_kinds):
        total += (attention if kind.value == "full_attention" else linear) + (sparse if arch.is_sparse(i) else mlp)
    return total + arch.mtp_num_layers * (attention + (sparse if arch.moe is not None else mlp) + 2 * h * h)
