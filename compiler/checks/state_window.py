"""The windowed-state contract of a main decoder, as onnxruntime-genai's `RecurrentState` reads it.

From the graph's input shapes alone (`src/models/recurrent_state.cpp`, both 0.18.0 and 0.17.1 carry
it): conv state of rank 4 and recurrent state of rank 5 make the model windowed with `W = dim 0`;
one windowed and the other not is a load error, so is a W that differs between them, and so is a
dynamic dim anywhere but batch (axis 1). A window that holds fewer tokens than a verify
(`speculative.max_draft_tokens` + 1) is not an error there: the runtime drafts W - 1 tokens instead,
silently, so it is one here. Presents must be shaped as their pasts: the runtime allocates one buffer
per state from the past's shape and binds it to both (`share_buffers_` on CPU), which the graphs
mtpc builds are safe for (they read past slot W - 1 before writing any slot: tests/graphs).
"""

from __future__ import annotations

from ..schema.validation import json_pointer
from .graphs import Graph, Tensor
from .package import Checker

# (past role, present role, rank unwindowed)
_STATES = (("past_conv_names", "present_conv_names", 3), ("past_recurrent_names", "present_recurrent_names", 4))


def check_state_window(c: Checker, rel: str, cfg: dict, decoder: dict, main: Graph,
                       names: dict[str, list[str]]) -> None:
    """`names`: role -> the graph tensors the decoder section names for it (templates expanded)."""
    where = json_pointer("model", "decoder", "filename")
    windows: dict[str, int] = {}
    kinds: dict[bool, str] = {}
    for past_role, present_role, rank in _STATES:
        for past_name, present_name in zip(names.get(past_role, ()), names.get(present_role, ())):
            past, present = main.inputs.get(past_name), main.outputs.get(present_name)
            if past is None or past.shape is None:
                continue
            windowed = len(past.shape) == rank + 1
            kinds.setdefault(windowed, past_name)
            if present is not None and present.shape is not None and tuple(present.shape) != tuple(past.shape):
                c.add(rel, where, f"{present_name!r} in {main.relpath} is {list(present.shape)} but its past "
                                  f"{past_name!r} is {list(past.shape)}: onnxruntime-genai binds one buffer to both")
            if windowed:
                _static_but_batch(c, rel, where, past, main.relpath)
                if isinstance(past.shape[0], int):
                    windows[past_name] = past.shape[0]
    if len(kinds) == 2:
        c.add(rel, where, f"{kinds[True]!r} in {main.relpath} is windowed and {kinds[False]!r} is not: onnxruntime-genai "
                          "refuses a model whose conv and recurrent state are not both windowed or both not")
    if len(set(windows.values())) > 1:
        sizes = ", ".join(f"{name} {w}" for name, w in sorted(windows.items()))
        c.add(rel, where, f"the state windows of {main.relpath} differ ({sizes}): onnxruntime-genai needs one W")
    speculative = cfg.get("speculative")
    drafts = speculative.get("max_draft_tokens") if isinstance(speculative, dict) else None
    window = min(windows.values(), default=0)
    if window and isinstance(drafts, int) and not isinstance(drafts, bool) and window < drafts + 1:
        c.add(rel, json_pointer("speculative", "max_draft_tokens"),
              f"is {drafts} but the state window of {main.relpath} holds {window} tokens: onnxruntime-genai drafts "
              f"at most W - 1 = {window - 1} (a verify is the drafts + 1)")


def _static_but_batch(c: Checker, rel: str, where: str, past: Tensor, graph: str) -> None:
    for axis, dim in enumerate(past.shape):
        if axis != 1 and not (isinstance(dim, int) and dim > 0):
            c.add(rel, where, f"{past.name!r} in {graph} has the dynamic dim {dim!r} at axis {axis}: a windowed state is "
                              "static but for batch (axis 1), or onnxruntime-genai refuses it")
            return
