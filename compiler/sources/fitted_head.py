"""An MTP head fitted to its own seeded main model, so its drafts are accepted (`source.synthetic.mtp_head: fitted`).

A seeded random head almost never agrees with the main model: speculative decoding with it only ever rejects,
and a first `mtpc verify` shows 0 % acceptance. This head is fitted to the main model instead (the numpy
reference, `mtpc.reference.forward`, computes the main model's greedy continuations):

- its decoder layer adds nothing (`o_proj` and `down_proj` are zero), so the head is a pure function of
  (token, seed hidden): whatever a runtime does with the head's own KV cache and positions, its drafts are
  the ones computed here;
- `mtp.norm` equals the main model's final norm, so the head's output is the main model's post-norm hidden
  state when the fit is exact, and seeds the next chained draft as the main model's hidden would;
- `mtp.fc` is a least-squares fit from [enorm(embed(t[i+1])), hnorm(post[i])] to the direction of the main
  model's pre-norm hidden at i+1, over the greedy continuations of the prompts, at the steps `memorised` picks.

A linear map does not generalise over a random model, but with fewer rows than inputs (2 x hidden_size) the
fit reproduces every row exactly: along those continuations the drafts are right, elsewhere about never.
The compiler's fit (`fitted_store`) memorises the prompts `mtpc verify` and `mtpc tune` decode by default
(`mtpc.util.decoding_defaults`), sharing the rows among them; the tests fit other prompts through
`fitted_head_tensors`. Everything is float64 numpy from a seed: the same spec gives the same head.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from ..ir import Architecture
from ..reference.forward import DecoderReference, rms_norm
from ..util.decoding_defaults import TUNE_PROMPTS, VERIFY_PROMPT
from ..weights import ArrayWeightStore
from .random_weights import TEXT_PREFIX, canonical_tensors, raw_hf_tensors
from .synthetic_tokenizer import encode

Prompts = Sequence[Sequence[int]]
HEAD = "mtp.layers.0."


def every_step(step: int) -> bool:
    return True


def fitted_fc(
    main: DecoderReference, weights, eps: float, prompts: Prompts, steps: int,
    memorised: Callable[[int], bool] = every_step, *, pre_norm_seed: bool = False, head: str = "mtp.",
) -> np.ndarray:
    """`mtp.fc.weight` fitted so the head memorises `main`'s greedy continuations of `prompts`: the draft after
    each of the first `steps` generated tokens of each, where `memorised(step)` (0-based) says so.

    `weights` holds the canonical embedding and the head's two input norms (effective scales, under `head`: a
    chained head's own, `mtp.heads.{k}.`). `pre_norm_seed`: the head is seeded with the trunk's hidden state
    before its final norm (Step-3.5); its output, the pre-norm direction of the next position, then seeds a
    chained head exactly as the trunk's would (the input norm ignores the scale)."""
    embedded, seeds, targets = [], [], []
    for prompt in prompts:
        generated = main.greedy(list(prompt), steps + 1)
        _, post, pre, _ = main.forward(np.asarray([[*prompt, *generated]]))
        for step in range(steps):
            if memorised(step):
                position = len(prompt) + step  # where generated[step] sits; its seed is the hidden just before
                embedded.append(weights["embed_tokens.weight"][generated[step]])
                seeds.append((pre if pre_norm_seed else post)[0, position - 1])
                targets.append(pre[0, position])
    inputs = np.concatenate(
        [
            rms_norm(np.asarray(embedded, np.float64), weights[head + "pre_fc_norm_embedding.weight"], eps),
            rms_norm(np.asarray(seeds), weights[head + "pre_fc_norm_hidden.weight"], eps),
        ],
        axis=-1,
    )
    # Fewer rows than inputs: the least-squares solution reproduces every row exactly.
    if inputs.shape[0] >= inputs.shape[1]:
        raise ValueError(f"{inputs.shape[0]} memorised steps are too many for an exact fit of {inputs.shape[1]} inputs")
    targets = np.asarray(targets)
    targets /= np.sqrt(np.mean(targets * targets, axis=-1, keepdims=True))  # mtp.norm ignores the scale
    fc_t, *_ = np.linalg.lstsq(inputs, targets, rcond=None)
    return np.ascontiguousarray(fc_t.T, dtype=np.float32)


def fitted_head_tensors(
    arch: Architecture, raw: dict[str, np.ndarray], prompts: Prompts, steps: int,
    memorised: Callable[[int], bool] = every_step,
) -> dict[str, np.ndarray]:
    """`raw` (a dense Qwen3.5's tensors in HF form, `random_weights.raw_hf_tensors`) with the fitted head in place
    of its own, fitted to the greedy continuations of `prompts` (see `fitted_fc`)."""
    canonical = canonical_tensors(arch, raw)
    main = DecoderReference(arch, ArrayWeightStore(canonical))
    fitted = dict(raw)
    fitted["mtp.fc.weight"] = fitted_fc(main, canonical, arch.rms_norm_eps, prompts, steps, memorised)
    fitted["mtp.norm.weight"] = raw[TEXT_PREFIX + "norm.weight"].copy()
    for silent in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
        fitted[HEAD + silent] = np.zeros_like(raw[HEAD + silent])
    return fitted


def default_prompts(arch: Architecture) -> tuple[tuple[int, ...], ...]:
    """What the compiler's fit memorises: verify's prompt, then tune's built-in ones as the synthetic tokenizer
    encodes them; a prompt the vocabulary cannot hold is left out."""
    found = [VERIFY_PROMPT] if max(VERIFY_PROMPT) < arch.vocab_size else []
    found += [ids for ids in (encode(arch, text) for text in TUNE_PROMPTS) if ids]
    return tuple(found)


def steps_per_prompt(arch: Architecture, prompts: int) -> int:
    """The rows of an exact fit (fewer than its 2 x hidden_size inputs), shared equally among the prompts."""
    return (2 * arch.hidden_size - 1) // max(prompts, 1)


def fitted_store(arch: Architecture, seed: int, norm_weight_scale: float) -> ArrayWeightStore:
    """The seeded model of `random_weights.seeded_store` with the fitted head, in canonical form."""
    return ArrayWeightStore(dict(_fitted_canonical(arch, seed, norm_weight_scale)))


@functools.lru_cache(maxsize=4)
def _fitted_canonical(arch: Architecture, seed: int, norm_weight_scale: float) -> dict[str, np.ndarray]:
    raw = raw_hf_tensors(arch, seed, norm_weight_scale=norm_weight_scale, with_mtp=True)
    prompts = default_prompts(arch)
    return canonical_tensors(arch, fitted_head_tensors(arch, raw, prompts, steps_per_prompt(arch, len(prompts))))
