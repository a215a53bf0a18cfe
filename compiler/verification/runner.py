"""Feeding a package's graphs to onnxruntime for `mtpc verify`, and turning a runtime's refusal into a finding.

`GraphRunner` runs a dense decoder graph (main model or MTP head) as a genai_config
section describes it, carrying its caches from one call to the next. Whatever
onnxruntime raises while loading or running it becomes `RuntimeRefused` with the
runtime's one-line reason, which verify reports as a failed check, not a crash.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

from ..util.lazy_import import lazy_module
from ..util.diagnostics import ExitCode, MtpcError

np = lazy_module("numpy")  # imported when a package is verified, not by every `mtpc` run (`--help` builds this verb's parser)

_STATE_PAIRS = (
    ("past_key_names", "present_key_names"),
    ("past_value_names", "present_value_names"),
    ("past_conv_names", "present_conv_names"),
    ("past_recurrent_names", "present_recurrent_names"),
)


class RuntimeRefused(Exception):
    """onnxruntime or onnxruntime-genai would not load or run a graph of the package."""


@contextmanager
def runtime_step(what: str):
    """Turns a runtime's exception during `what` into `RuntimeRefused` with its one-line reason."""
    try:
        yield
    except Exception as error:  # the runtimes raise their own classes (pybind Fail, RuntimeError, ...)
        raise RuntimeRefused(f"{what}: {_reason(error)}") from error


def _reason(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    # "[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: ... [ONNXRuntimeError] : 1 : FAIL : why"
    text = re.split(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", text)[-1]
    return text.splitlines()[0].strip() if text.strip() else type(error).__name__


def _templates(section: dict) -> dict[str, str]:
    return {k: v for k, v in (section or {}).items() if isinstance(v, str) and v}


def _np_dtype(ort_type: str):
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
            "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bfloat16)": np.float32}[ort_type]


class GraphRunner:
    """Feeds a dense decoder graph named by a genai_config decoder (or mtp) section, carrying its caches."""

    def __init__(self, path: Path, inputs: dict, outputs: dict, num_layers: int, head_dim: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4  # fatal only: a refusal is reported once, by verify, not also as a log line
        with runtime_step(f"onnxruntime could not load {path.name}"):
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.meta = {i.name: i for i in self.session.get_inputs()}
        self.inputs, self.outputs = _templates(inputs), _templates(outputs)
        self.head_dim = head_dim
        self.pairs: dict[str, str] = {}  # past input -> present output
        for past_role, present_role in _STATE_PAIRS:
            past, present = self.inputs.get(past_role), self.outputs.get(present_role)
            if past and present:
                for i in range(num_layers):
                    if past.replace("%d", str(i)) in self.meta:
                        self.pairs[past.replace("%d", str(i))] = present.replace("%d", str(i))
        self.state: dict[str, np.ndarray] = {}
        self.length = 0
        self.name = path.name

    def _zeros(self, name: str) -> np.ndarray:
        shape = []
        for axis, dim in enumerate(self.meta[name].shape):
            if isinstance(dim, int):
                shape.append(dim)
            elif axis == 0 or dim == "batch_size":
                shape.append(1)  # batch (axis 1 behind a state window)
            elif "sequence" in str(dim):
                shape.append(0)
            else:
                shape.append(self.head_dim)  # a symbolic KV width ("kv_cache_dim")
        return np.zeros(shape, _np_dtype(self.meta[name].type))

    def run(self, token_ids, extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        ids = np.asarray([token_ids], np.int64)
        s = ids.shape[1]
        feeds: dict[str, np.ndarray] = {}
        for name, meta in self.meta.items():
            if extra and name in extra:
                feeds[name] = extra[name].astype(_np_dtype(meta.type))
            elif name == self.inputs.get("input_ids", "input_ids"):
                feeds[name] = ids
            elif name == self.inputs.get("attention_mask", "attention_mask"):
                feeds[name] = np.ones((1, self.length + s), np.int64)
            elif name == self.inputs.get("position_ids", "position_ids"):
                pos = np.arange(self.length, self.length + s, dtype=np.int64)[None, :]
                feeds[name] = np.broadcast_to(pos, (3, 1, s)).copy() if len(meta.shape) == 3 else pos
            elif name in self.pairs:
                feeds[name] = self.state.get(name, self._zeros(name))
            else:
                raise MtpcError.single(f"verify does not know how to feed graph input {name!r}", exit_code=ExitCode.FINDINGS)
        names = [o.name for o in self.session.get_outputs()]
        with runtime_step(f"onnxruntime could not run {self.name}"):
            results = dict(zip(names, self.session.run(names, feeds)))
        for past, present in self.pairs.items():
            self.state[past] = results[present]
        self.length += s
        return results
