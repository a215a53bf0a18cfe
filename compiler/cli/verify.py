"""`mtpc verify DIR --spec SPEC`: run a package and compare it with the numpy reference.

The package does not record where its weights came from (it holds only what
its runtimes read), so `verify` takes the spec it was compiled from and
re-derives the weights from the spec's source. Steps, stopping at the first
that fails:

1. the static checks of `mtpc check DIR`;
2. onnxruntime: `model.onnx` on a prompt (prefill) and one more token (a step
   with the caches it returned), logits and the hidden state the head is
   seeded from, against `mtpc.reference.Qwen35Reference`;
3. the MTP head graph named by `model.mtp.filename` on the same tokens, seeded
   with the reference's hidden state, against `MtpHeadReference`; likewise the
   onnx-genai head the speculator config names, fed the embedded tokens;
4. onnxruntime-genai: plain greedy decoding, then `og.MtpGenerator`
   speculative decoding from the head's own folder; the two token sequences
   must be identical. The draft acceptance rate is reported.

Paged packages (CUDA, packed `[N]` inputs) cannot run on CPU: only step 1, and
the verdict says so. A package with an MTP head checked against a spec whose
source ships none is the wrong spec: a failed check, not a note.
A runtime that refuses the package (a graph it cannot load or run) is a failed
check with the runtime's one-line reason, not a crash.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from ..checks import GENAI_CONFIG, check_package, is_runtime_package
from ..diagnostics import ExitCode, MtpcError
from .report import console, verb_parser, existing_dir, existing_file, out, print_json

HELP = "run a package on CPU and compare it with the numpy reference and greedy decoding"
EPILOG = """\
Give the spec the package was compiled from: the weights are re-derived from the
spec's source for the reference. The package records no build-machine paths, but
its provenance.json holds that spec's text and hash and the source's fingerprint;
verify compares them first and warns when the spec or the checkpoint differs (and
a MISMATCH then says it is the wrong spec, not a broken package).
Tolerances follow the build (override with --atol, relative to the largest
reference value): float32 graphs must match the reference closely and decode
the same greedy tokens; float16 I/O gets a looser bound. For a quantized build
the reference uses the weights as the package stores them (quantized, then
dequantized), so the bound is that of its I/O dtype: it covers the runtime's
arithmetic, not the rounding of the weights. Only MatMulNBits with accuracy_level > 0
(rounding activations to int8 or float16; on CPU that is the default, 4) gets a looser bound.

examples:
  mtpc verify out/qwen35-tiny-mtp --spec specs/qwen35-tiny-mtp.yaml
  mtpc verify pkg --spec spec.yaml --prompt 1,17,42,99 --new-tokens 16 --draft-tokens 3
  mtpc verify pkg --spec spec.yaml --format json | jq .acceptance_rate
"""

DEFAULT_PROMPT = (1, 17, 42, 99, 5, 23)
MAX_DRAFT_TOKENS = 16  # onnxruntime-genai 0.18.0 accepts max_draft_tokens in 1..16
_STATE_PAIRS = (
    ("past_key_names", "present_key_names"),
    ("past_value_names", "present_value_names"),
    ("past_conv_names", "present_conv_names"),
    ("past_recurrent_names", "present_recurrent_names"),
)


def add_parser(sub) -> None:
    p = verb_parser(sub, "verify", HELP, EPILOG)
    p.add_argument("package", metavar="DIR", help="the compiled package")
    p.add_argument("--spec", required=True, metavar="SPEC", help="the spec the package was compiled from")
    p.add_argument(
        "--prompt", type=token_ids, default=DEFAULT_PROMPT, metavar="IDS",
        help="comma-separated prompt token ids (default: a fixed short prompt)",
    )
    p.add_argument(
        "--new-tokens", type=whole_number(1), default=8, metavar="N",
        help="tokens to generate, at least 1; prompt plus N must fit the context length (default 8)",
    )
    p.add_argument(
        "--draft-tokens", type=whole_number(1, MAX_DRAFT_TOKENS), default=2, metavar="K",
        help=f"MTP draft tokens per step, 1 to {MAX_DRAFT_TOKENS} (default 2)",
    )
    p.add_argument(
        "--atol", type=tolerance_value, metavar="X",
        help="allowed deviation (>= 0), relative to the largest reference value",
    )
    p.set_defaults(run=run)


def whole_number(least: int, most: int | None = None):
    """An argparse type: an integer in [least, most]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least or (most is not None and value > most):
            bounds = f"from {least} to {most}" if most is not None else f"at least {least}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    parse.__name__ = "whole number"
    return parse


def tolerance_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def token_ids(text: str) -> tuple[int, ...]:
    parts = [t.strip() for t in text.split(",")]
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give at least one token id (or leave --prompt out for the default)")
    try:
        ids = tuple(int(t) for t in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of token ids") from None
    if min(ids) < 0:
        raise argparse.ArgumentTypeError(f"token ids cannot be negative, got {min(ids)}")
    return ids


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


@dataclass
class Report:
    checks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)  # what ran: "static checks", "onnxruntime", "onnxruntime-genai"
    static_only: str | None = None  # why nothing could run, when only the static checks were done
    greedy: list[int] | None = None
    speculative: list[int] | None = None
    reference_greedy: list[int] | None = None
    stats: dict | None = None
    # How the package's provenance.json disagrees with the spec given (see mtpc.provenance).
    provenance: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.checks)

    def compare(self, what: str, got: np.ndarray, want: np.ndarray, tolerance) -> None:
        tolerance = tolerance(np.asarray(got))
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            self.checks.append({"check": what, "ok": False, "detail": f"shape {list(got.shape)} != reference {list(want.shape)}"})
            return
        scale = max(1.0, float(np.abs(want).max()))
        diff = float(np.abs(got - want).max())
        self.checks.append({"check": what, "ok": diff <= tolerance * scale, "max_abs_diff": diff, "bound": tolerance * scale})

    def agree(self, what: str, ok: bool, detail: str) -> None:
        self.checks.append({"check": what, "ok": ok, "detail": detail})


# ----------------------------------------------------------------------------- feeding graphs


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
            elif axis == 0:
                shape.append(1)  # batch
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


# ----------------------------------------------------------------------------- the verb


def tolerance_for(ir, weights, atol: float | None):
    """Allowed deviation of an output (relative to the largest reference value), by how it was built.

    The reference is float64 from the source's weights, quantized and dequantized
    as the build stores them (`AsBuiltWeights`): what is left is the runtime's own
    arithmetic, so a quantized build gets the bound of its I/O dtype (an intact int4
    package is ~1e-3 off, a few damaged scales ~1e-1). It is wider for float16
    activations, and for MatMulNBits with accuracy_level > 0, which rounds the
    activations to int8 (or float16) before multiplying, an error the reference
    does not model; and one float16 rounding at the end for a float16 output (the
    CPU profile's logits).
    """
    rounded_activations = rounds_activations(ir, weights)

    def tolerance(output: np.ndarray) -> float:
        if atol is not None:
            return atol
        if rounded_activations:
            return 1e-1
        if ir.precision.io_dtype != "float32":
            return 3e-2
        return 4e-3 if output.dtype == np.float16 else 1e-3

    return tolerance


class AsBuiltWeights:
    """The source's weights as a quantized build computes with them: each linear weight the plan
    quantizes goes through the same quantize -> dequantize, so the reference sees the package's rounding
    and only a wrong graph or a damaged weight is left to tell them apart."""

    def __init__(self, store, plan, table=()):
        # `table`: the IR's weight decisions (ModelIR.weights); when given, each weight is stored as it says.
        self._store, self._plan = store, plan
        self._table = {w.name: w for w in table}

    def names(self):
        return self._store.names()

    def info(self, name: str):
        return self._store.info(name)

    def read(self, name: str):
        return self.read_float(name)

    def read_float(self, name: str) -> np.ndarray:
        from ..ir import WeightRole
        from ..quant import embedding_form, embedding_requested, materialize, resolve
        from ..weights import QuantizedTensor

        if self._table:
            decision = self._table.get(name)
            if decision is None or decision.form is None:
                return self._store.read_float(name)
            embedding = decision.role is WeightRole.EMBEDDING
            symmetric = self._plan.scheme_for(name).symmetric if embedding else not decision.form.has_zero_points
            return materialize(self._store.read(name), decision.form, symmetric=symmetric).dequantize()
        # Norms, conv kernels, gate vectors, and an embedding the plan stores float, are built as the source has them.
        info = self._store.info(name)
        if name.endswith("embed_tokens.weight"):
            requested = embedding_requested(self._plan, name)
            if embedding_form(info, self._plan.scheme_for(name), requested) is None:
                return self._store.read_float(name)
        elif len(info.shape) != 2:
            return self._store.read_float(name)
        weight = resolve(self._store.read(name), self._plan.scheme_for(name))
        return weight.dequantize() if isinstance(weight, QuantizedTensor) else np.asarray(weight, np.float32)

    def close(self) -> None:
        self._store.close()


def stores_quantized(ir, weights) -> bool:
    """Whether the package stores any weight quantized: one the plan quantizes, or a source-quantized one it keeps."""
    from ..quant import resolved_form

    if ir.weights:
        return any(w.form is not None for w in ir.weights)
    return any(
        resolved_form(info, ir.quantization.scheme_for(name)) is not None
        for name in weights.names()
        if len((info := weights.info(name)).shape) == 2
    )


def rounds_activations(ir, weights) -> bool:
    """Whether a weight stored quantized has accuracy_level > 0: its MatMulNBits rounds the activations too."""
    from ..passes.quantization import profile_accuracy
    from ..quant import resolved_form

    def accuracy_level(name: str) -> int:
        level = ir.quantization.scheme_for(name).accuracy_level
        return profile_accuracy(ir) if level is None else level

    return any(
        accuracy_level(name) > 0
        and resolved_form(info, ir.quantization.scheme_for(name)) is not None
        for name in weights.names()
        if len((info := weights.info(name)).shape) == 2
    )


def strict_greedy(ir, weights) -> bool:
    """float32 activations, rounded nowhere but in the weights the reference shares: greedy tokens must match it."""
    return ir.precision.io_dtype == "float32" and not rounds_activations(ir, weights)


def _is_paged(cfg: dict) -> bool:
    decoder = (cfg.get("model") or {}).get("decoder") or {}
    return "dynamic_batching" in (cfg.get("engine") or {}) or "block_table" in (decoder.get("inputs") or {})


def _head_folder(root: Path, cfg: dict) -> Path | None:
    """The folder whose genai_config.json makes the MTP head an og.Model of its own."""
    head_file = ((cfg.get("model") or {}).get("mtp") or {}).get("filename")
    if not head_file:
        return None
    for sub in sorted(root.rglob(GENAI_CONFIG)):
        if sub.parent == root:
            continue
        dec = (json.loads(sub.read_text("utf-8")).get("model") or {}).get("decoder") or {}
        rel = PurePosixPath(sub.parent.relative_to(root).as_posix()) / str(dec.get("filename", ""))
        if str(rel) == head_file:
            return sub.parent
    return None


def run(args) -> int:
    root = package_root(args.package)
    spec = existing_file(args.spec, "spec")
    progress = console(args)
    prompt = args.prompt
    report = Report()

    progress("static checks")
    report.steps.append("static checks")
    findings = check_package(root)
    for f in findings:
        report.agree("static", False, f.render())
    if findings:
        return _finish(args, report)
    cfg_path = root / GENAI_CONFIG
    if not cfg_path.is_file():
        report.static_only = "no genai_config.json: nothing to run on onnxruntime"
        return _finish(args, report)
    cfg = json.loads(cfg_path.read_text("utf-8"))
    if _is_paged(cfg):
        report.static_only = "paged packages cannot run on CPU"
        return _finish(args, report)
    context = (cfg.get("model") or {}).get("context_length")
    if isinstance(context, int) and len(prompt) + args.new_tokens > context:
        raise MtpcError.single(
            f"--new-tokens {args.new_tokens} with a {len(prompt)}-token prompt exceeds the package's context length ({context})",
            exit_code=ExitCode.USAGE,
            hint=f"use --new-tokens {context - len(prompt)} or less" if len(prompt) < context else "use a shorter --prompt",
        )
    try:
        _run_package(args, root, spec, cfg, prompt, report, progress)
    except RuntimeRefused as refused:
        report.agree("runtime", False, str(refused))
    return _finish(args, report)


def package_root(path: str) -> Path:
    """The package folder `verify` was given, refused (usage) when it is not a package root."""
    root = existing_dir(path, "package")
    if not is_runtime_package(root):
        raise MtpcError.single(
            f"{path!r} holds no genai_config.json or inference_metadata.yaml: not an mtpc package",
            exit_code=ExitCode.USAGE,
            hint="give the folder `mtpc compile` wrote (a checkpoint is the spec's source, not a package)",
        )
    config = root / GENAI_CONFIG
    if config.is_file():
        try:
            decoder = (json.loads(config.read_text("utf-8")).get("model") or {}).get("decoder") or {}
        except (ValueError, AttributeError):
            decoder = {}  # a malformed config is for the static checks to report
        if isinstance(decoder, dict) and "hidden_states" in (decoder.get("inputs") or {}):
            raise MtpcError.single(
                f"{path!r}: this is the MTP head's folder; pass the package root", exit_code=ExitCode.USAGE,
                hint=f"mtpc verify {root.resolve().parent} --spec ...",
            )
    return root


def require_runtime() -> None:
    """onnxruntime and onnxruntime-genai are the `runtime` extra, not dependencies: say so when one is missing."""
    import importlib

    for module, package in (("onnxruntime", "onnxruntime"), ("onnxruntime_genai", "onnxruntime-genai")):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise MtpcError.single(
                f"mtpc verify runs the package in {package}, which cannot be imported: {err}",
                exit_code=ExitCode.USAGE,
                hint="install the runtime extra: pip install 'mtpc[runtime]'",
            ) from None


def _run_package(args, root: Path, spec: Path, cfg: dict, prompt, report: Report, progress) -> None:
    """Steps 2 to 4 of the module docstring, adding to `report`."""
    require_runtime()
    from .. import sources
    from ..driver import build_ir

    ir, info = build_ir(spec)
    from ..provenance import package_mismatches

    report.provenance = package_mismatches(root, ir, spec)
    for message in report.provenance:  # said now: a wrong spec makes everything after it fail
        progress(f"warning: {message}")
    if max(prompt) >= ir.architecture.vocab_size:
        raise MtpcError.single(
            f"prompt token {max(prompt)} is outside the vocabulary ({ir.architecture.vocab_size})",
            exit_code=ExitCode.USAGE,
        )
    progress("reading weights for the reference")
    weights = sources.open_weights(ir.source, info)
    try:
        _compare(args, root, cfg, prompt, report, progress, ir, weights)
    finally:
        weights.close()


def _compare(args, root: Path, cfg: dict, prompt, report: Report, progress, ir, weights) -> None:
    from ..ir import SeedHidden
    from ..reference import MtpHeadReference, Qwen35Reference

    arch = ir.architecture
    tolerance = tolerance_for(ir, weights, args.atol)
    strict = strict_greedy(ir, weights)
    if stores_quantized(ir, weights):
        weights = AsBuiltWeights(weights, ir.quantization, ir.weights)
    reference = Qwen35Reference(arch, weights)
    decoder = cfg["model"]["decoder"]

    progress("running model.onnx on onnxruntime")
    report.steps.append("onnxruntime")
    main = GraphRunner(root / decoder["filename"], decoder.get("inputs", {}), decoder.get("outputs", {}), decoder["num_hidden_layers"], arch.head_dim)
    ref_logits, ref_post, ref_pre, ref_state = reference.forward(np.asarray([prompt]))
    hidden_name = (decoder.get("outputs") or {}).get("hidden_states")
    ref_seed = ref_pre if ir.mtp.seed_hidden is SeedHidden.PRE_NORM else ref_post
    got = main.run(prompt)
    report.compare("main prefill logits", got[main.outputs.get("logits", "logits")], ref_logits, tolerance)
    if hidden_name:
        report.compare("main prefill hidden state", got[hidden_name], ref_seed, tolerance)
    step_token = int(np.argmax(ref_logits[0, -1]))
    step_logits, step_post, step_pre, _ = reference.forward(np.asarray([[step_token]]), ref_state)
    got = main.run([step_token])
    report.compare("main step logits", got[main.outputs.get("logits", "logits")], step_logits, tolerance)

    mtp = (cfg["model"].get("mtp") or {})
    sidecar = _speculator(root)
    if (mtp.get("filename") or sidecar) and arch.mtp_num_layers == 0:
        report.agree(
            "spec", False,
            "package has an MTP head but the spec's source ships none: is this the spec it was compiled from?",
        )
    if mtp.get("filename") and arch.mtp_num_layers > 0:
        progress(f"running {mtp['filename']} on onnxruntime")
        head = GraphRunner(root / mtp["filename"], mtp.get("inputs", {}), mtp.get("outputs", {}), mtp.get("num_hidden_layers", 1), arch.head_dim)
        head_ref = MtpHeadReference(arch, weights)
        # The head at position t reads token t+1 and the trunk's hidden state at t.
        ids = list(prompt[1:]) + [step_token]
        seed = np.asarray(ref_seed, np.float64)
        want_logits, want_hidden, _ = head_ref.forward(np.asarray([ids]), seed, np.arange(len(ids))[None, :])
        hidden_input = (mtp.get("inputs") or {}).get("hidden_states", "hidden_states")
        got = head.run(ids, {hidden_input: seed})
        report.compare("mtp head logits", got[head.outputs.get("logits", "logits")], want_logits, tolerance)
        hidden_out = (mtp.get("outputs") or {}).get("hidden_states", "hidden_states_out")
        if hidden_out in got:
            report.compare("mtp head hidden state", got[hidden_out], want_hidden, tolerance)
    if sidecar and arch.mtp_num_layers > 0:
        _check_sidecar(root, sidecar, prompt, step_token, ref_seed, arch, weights, report, tolerance, progress)

    _decode(root, cfg, prompt, args, report, reference, strict, progress)


def _speculator(root: Path) -> dict | None:
    """The onnx-genai SpeculatorConfig: config.json (workflow layout) or the metadata's `speculative` (flat)."""
    import yaml

    config, metadata = root / "config.json", root / "inference_metadata.yaml"
    if config.is_file():
        found = json.loads(config.read_text("utf-8")).get("speculator_config")
        if found:
            return found
    if metadata.is_file():
        return (yaml.safe_load(metadata.read_text("utf-8")) or {}).get("speculative")
    return None


def _check_sidecar(root, speculator, prompt, step_token, seed, arch, weights, report, tolerance, progress) -> None:
    """onnx-genai's head: the runtime embeds the tokens itself and applies the LM head to `mtp_hidden`."""
    from ..reference import MtpHeadReference

    progress(f"running {speculator['model']} on onnxruntime")
    kv = {"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    present = {"present_key_names": "present.%d.key", "present_value_names": "present.%d.value"}
    runner = GraphRunner(root / speculator["model"], kv, present, 1, arch.head_dim)
    ids = list(prompt[1:]) + [step_token]
    embeds = np.asarray(weights.read_float("embed_tokens.weight"))[ids][None]
    seed = np.asarray(seed, np.float64)
    _, want_hidden, _ = MtpHeadReference(arch, weights).forward(np.asarray([ids]), seed, np.arange(len(ids))[None, :])
    got = runner.run(ids, {"inputs_embeds": embeds, "hidden_states": seed})
    report.compare("onnx-genai head hidden state", got[speculator["mtp_hidden_output"]], want_hidden, tolerance)


def _decode(root, cfg, prompt, args, report: Report, reference, strict: bool, progress) -> None:
    import onnxruntime_genai as og

    max_length = len(prompt) + args.new_tokens
    progress("greedy decoding with onnxruntime-genai")
    report.steps.append("onnxruntime-genai")
    with runtime_step("onnxruntime-genai greedy decoding failed"):
        model = og.Model(str(root))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max_length, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(list(prompt))
        while not gen.is_done():
            gen.generate_next_token()
        report.greedy = [int(t) for t in gen.get_sequence(0)][len(prompt):]
    report.reference_greedy = reference.greedy(list(prompt), len(report.greedy))
    agree = report.greedy == report.reference_greedy
    if strict:
        report.agree("greedy tokens vs reference", agree, f"{report.greedy} vs {report.reference_greedy}")
    elif not agree:
        report.notes.append(f"greedy tokens differ from the reference (expected with this precision): {report.greedy} vs {report.reference_greedy}")

    head_dir = _head_folder(root, cfg)
    if head_dir is None:
        if (cfg.get("model") or {}).get("mtp"):
            report.notes.append("no folder with the head's own genai_config.json: speculative decoding not run")
        return
    progress(f"MTP speculative decoding ({args.draft_tokens} draft tokens)")
    with runtime_step("onnxruntime-genai MTP speculative decoding failed"):
        head = og.Model(str(head_dir))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max_length, do_sample=False)
        params.set_speculative_options(max_draft_tokens=args.draft_tokens)
        gen = og.MtpGenerator(model, head, params)
        gen.append_tokens(list(prompt))
        while not gen.is_done():
            gen.generate_next_token()
        report.speculative = [int(t) for t in gen.get_sequence()][len(prompt):]  # MtpGenerator is batch 1: no index
        report.stats = {k: v for k, v in sorted(dict(gen.get_stats()).items())}
    report.agree("speculative == greedy", report.speculative == report.greedy, f"{report.speculative} vs {report.greedy}")


def acceptance_rate(stats: dict | None) -> float | None:
    if not stats:
        return None
    accepted = stats.get("draft_tokens_accepted")
    tried = stats.get("draft_tokens_evaluated") or stats.get("draft_tokens_proposed")
    if accepted is None or not tried:
        return None
    return float(accepted) / float(tried)


def _verdict(report: Report, refused: bool) -> str:
    if report.ok:
        return "verify: ok" + (" (but see the provenance warnings above)" if report.provenance else "")
    if refused:
        return "verify: FAILED (a runtime refused the package)"
    if any("different spec" in m for m in report.provenance):
        return "verify: MISMATCH: the package was compiled from another spec (see the warnings; its spec is in provenance.json)"
    if any("source differs" in m for m in report.provenance):
        return "verify: MISMATCH: the package was compiled from another source checkpoint (see the warnings)"
    return "verify: MISMATCH"


def _finish(args, report: Report) -> int:
    rate = acceptance_rate(report.stats)
    if args.format == "json":
        print_json(
            "verify",
            {
                "ok": report.ok,
                "checks": report.checks,
                "notes": report.notes,
                "steps": report.steps,
                "static_only": report.static_only,
                "greedy": report.greedy,
                "speculative": report.speculative,
                "reference_greedy": report.reference_greedy,
                "stats": report.stats,
                "acceptance_rate": rate,
                "provenance": report.provenance,
            },
        )
    else:
        for c in report.checks:
            mark = "ok  " if c["ok"] else "FAIL"
            if "max_abs_diff" in c:
                out(f"{mark} {c['check']}: max |diff| {c['max_abs_diff']:.3g} (bound {c['bound']:.3g})")
            else:
                out(f"{mark} {c['check']}: {c['detail']}")
        for note in report.notes:
            out(f"note: {note}")
        for message in report.provenance:
            out(f"warning: {message}")
        if report.greedy is not None:
            out(f"greedy tokens:      {report.greedy}")
        if report.speculative is not None:
            out(f"speculative tokens: {report.speculative}")
        if rate is not None:
            out(f"draft acceptance:   {rate:.0%} ({report.stats.get('draft_tokens_accepted')} of {report.stats.get('draft_tokens_evaluated') or report.stats.get('draft_tokens_proposed')})")
        refused = any(c["check"] == "runtime" and not c["ok"] for c in report.checks)
        if report.ok and report.static_only:
            out(f"verify: static checks only ({report.static_only})")
            return int(ExitCode.OK)
        out(_verdict(report, refused))
    return int(ExitCode.OK) if report.ok else int(ExitCode.FINDINGS)
