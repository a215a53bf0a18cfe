"""Window the dense main graph's linear-attention state, so a rejected draft costs no replay forward.

onnxruntime-genai's `og.MtpGenerator` verifies [token, drafts] in one main forward. When only a
prefix is accepted, the linear-attention layers' state has run past it; without a window the
runtime restores a snapshot and replays the accepted prefix, a whole extra forward. With a window
it crops instead (`mtp_generator.cpp`, `direct_commit`: greedy with N >= 2, and sampling):

- the switch is the graph's input shapes and nothing else (`src/models/recurrent_state.cpp`):
  conv state of rank 4 and recurrent state of rank 5, `W = dim 0`, the same W on both, every dim
  static but batch (axis 1);
- past and present are `[W, batch, ...]`; present slot j holds the state after token T - W + j of
  the T tokens run (right-aligned; slots before the forward's first token are zero, as onnxruntime's
  own `state_window` leaves them); the runtime reads only past slot W - 1 and, after a verify,
  copies the accepted token's slot to W - 1 (`CropToPosition`, a byte copy);
- the runtime drafts at most W - 1 tokens (`max_draft_tokens` is clamped), so W = drafts + 1.

`state_window: auto` windows a dense main graph with linear-attention layers when the package
drafts with an onnxruntime-genai head, unless its MatMulNBits compute with int8 activations
(`accuracy_level` 4, the CPU profile's int4 default); `off` never; a number W always (the profile has
checked it holds a verify). Why not at level 4, measured on the 348M checkpoint (bench/README.md,
"Windowed recurrent state"): a crop takes the bonus token from the wide verify forward instead of a
one-token replay, and with int8 activations those differ at near ties, so speculative tokens left
greedy's within 64 tokens where the unwindowed package's did not; and there the window's writes cost
about 15 ms a forward (plain decoding 24-31 % slower, the best head at 4 drafts 1.68x instead of 1.83x). The graphs compute the window with ops every execution provider runs
(`graphs/state_window.py`).

onnx-genai cannot run a windowed graph: its engine zero-fills a state input of the graph's own shape
with only the leading axis taken for batch, and refuses a symbolic dim anywhere else
(`crates/onnx-genai-engine/src/decode/values.rs`, `concrete_fixed_state_shape`, at ac9c7dd). With an
onnx_genai target the package therefore also holds the unwindowed main graph as `decoder.onnx`, the
name onnx-genai's loader takes before any other (`crates/onnx-genai-ort/src/loader.rs`,
`resolve_model_path`); it reads the windowed graph's data file, so the weights are stored once.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import AttentionMode, GraphContract, HeadContract, ModelIR, TensorSpec
from ..profiles.onnx_genai import PROFILE as ONNX_GENAI
from ..util.diagnostics import MtpcError
from .pipeline import PassResult

# onnx-genai's loader takes `decoder.onnx` before any other `.onnx` at the package root.
ONNX_GENAI_DECODER = ONNX_GENAI.decoder_graph
STATE_ROLES = ("past_conv_names", "past_recurrent_names", "present_conv_names", "present_recurrent_names")
SETTING_PATH = "targets.onnxruntime_genai.state_window"
# MatMulNBits' accuracy_level computing with int8 activations.
INT8_ACTIVATIONS = 4


def resolved_window(ir: ModelIR) -> int:
    """The W the package's main graph gets (0: unwindowed), or an error for a W that cannot apply."""
    target = ir.targets.onnxruntime_genai
    if target is None or target.state_window == "off" or target.attention is AttentionMode.PAGED:
        return 0
    has_linear = bool(ir.architecture.state_layers)
    if target.state_window == "auto":
        return target.max_draft_tokens + 1 if auto_windows(ir) and not int8_activations(ir) else 0
    if not has_linear:
        raise MtpcError.single(
            f"state_window {target.state_window}: the model has no linear-attention layers, so it has no state to window",
            hint="remove state_window (auto leaves such a model as it is)",
            path=SETTING_PATH,
        )
    return int(target.state_window)


def auto_windows(ir: ModelIR) -> bool:
    """Whether `auto` would window a dense main graph: it has linear-attention layers and an onnxruntime-genai head drafts."""
    has_linear = bool(ir.architecture.state_layers)
    return has_linear and ir.head(HeadContract.ORT_GENAI) is not None


def int8_activations(ir: ModelIR) -> bool:
    """Whether a main-graph weight is a MatMulNBits / QMoE that computes with int8 activations (accuracy_level 4)."""
    return any(w.form is not None and w.accuracy_level >= INT8_ACTIVATIONS and not w.name.startswith("mtp.")
               for w in ir.weights)


AUTO_SKIPPED = ("state_window auto: the main graph is not windowed, because its int4 weights compute with int8 "
                "activations (accuracy_level 4), where a crop can leave greedy's tokens at near ties and the "
                "window costs more than it saves (docs/spec.md); state_window: W windows it anyway")


class StateWindow:
    name = "state-window"

    def __call__(self, ir: ModelIR) -> PassResult:
        window = resolved_window(ir)
        if _skipped_for_int8(ir, window) and AUTO_SKIPPED not in ir.notes:
            return PassResult(replace(ir, notes=(*ir.notes, AUTO_SKIPPED)), True, (AUTO_SKIPPED,))
        if window == ir.main.state_window:
            return PassResult(ir, False)
        main = windowed_decoder(ir.main, window)
        changes = [f"main decoder: conv and recurrent state windowed over {window} tokens ([{window}, batch, ...]; "
                   f"onnxruntime-genai crops a partly accepted verify instead of replaying it)"]
        onnx_genai_main = None
        if ir.targets.onnx_genai is not None:
            onnx_genai_main = replace(ir.main, filename=ONNX_GENAI_DECODER)
            changes.append(f"onnx-genai main decoder: {ONNX_GENAI_DECODER}, unwindowed, on {ir.main.filename}'s "
                           f"weights (onnx-genai cannot zero-fill a windowed state)")
        return PassResult(replace(ir, main=main, onnx_genai_main=onnx_genai_main), True, tuple(changes))


def _skipped_for_int8(ir: ModelIR, window: int) -> bool:
    """`auto` left unwindowed a dense package it would window, for its int8 activations (compile says so)."""
    target = ir.targets.onnxruntime_genai
    return (not window and target is not None and target.state_window == "auto" and target.attention is AttentionMode.DENSE
            and auto_windows(ir) and int8_activations(ir))


def windowed_decoder(cfg, window: int):
    """`cfg` (dense, unwindowed) with every conv / recurrent state tensor given a leading window axis."""
    if cfg.attention is not AttentionMode.DENSE or cfg.state_window:
        raise AssertionError(f"{cfg.filename}: only a dense, unwindowed decoder gets a state window")
    templates = dict(cfg.inputs + cfg.outputs)
    linear = [i for i, kind in enumerate(cfg.layer_kinds) if kind.has_recurrent_state]
    names = {templates[role] % i for role in STATE_ROLES if role in templates for i in linear}

    def windowed(t: TensorSpec) -> TensorSpec:
        return replace(t, shape=(window, *t.shape)) if t.name in names else t

    contract = GraphContract(tuple(map(windowed, cfg.contract.inputs)), tuple(map(windowed, cfg.contract.outputs)))
    return replace(cfg, contract=contract, state_window=window)
