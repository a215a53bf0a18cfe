"""What `mtpc verify` runs and what it found: the comparisons of steps 2 to 4 (see `mtpc.verification`).

`Report` collects each comparison; `compare_package` runs the main graph and the
heads on onnxruntime against the numpy reference, then onnxruntime-genai's greedy and
MTP speculative decoding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..util.lazy_import import lazy_module
from ..tuning.package import head_folder
from .runner import GraphRunner, runtime_step
from .tolerance import AsBuiltWeights, stores_quantized, strict_greedy, tolerance_for

np = lazy_module("numpy")  # imported when a package is verified, not by every `mtpc` run (`--help` builds this verb's parser)


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
    # How the package's provenance.json disagrees with the spec given (see mtpc.emit.provenance_record).
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


def _why_tokens_differ(report: Report) -> str:
    """The cause of a greedy divergence that this precision's tolerance allows: the real one where it is known.

    A package built from another spec or checkpoint (its provenance says so), or logits already outside their
    bounds, explain it; only when the logits agree within the bounds is it the precision (a near tie)."""
    if report.provenance:
        return "the package was not built from this spec and checkpoint: see the provenance warnings"
    off = [c["check"] for c in report.checks if not c["ok"] and "logits" in c["check"]]
    if off:
        return f"the logits already differ beyond their bounds: {', '.join(off)}"
    return "expected with this precision: the logits agree within their bounds, and a near tie can go either way"


def compare_package(options, root: Path, cfg: dict, prompt, report: Report, progress, ir, weights) -> None:
    from ..ir import SeedHidden
    from ..reference.forward import DecoderReference, MtpHeadReference
    from .vision import compare_vision

    arch = ir.architecture
    tolerance = tolerance_for(ir, weights, options.atol)
    strict = strict_greedy(ir, weights)
    if stores_quantized(ir, weights):
        weights = AsBuiltWeights(weights, ir.quantization, ir.weights)
    reference = DecoderReference(arch, weights)
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
        vocabulary = ir.mtp.draft_vocabulary
        head_ref = MtpHeadReference(arch, weights, own_lm_head=ir.mtp.own_lm_head,
                                    draft_vocabulary=None if vocabulary is None else vocabulary.ids,
                                    seed_hidden=ir.mtp.seed_hidden)
        # The head at position t reads token t+1 and the trunk's hidden state at t.
        ids = list(prompt[1:]) + [step_token]
        seed = np.asarray(ref_seed, np.float64)
        want_logits, want_hidden, _ = head_ref.forward(np.asarray([ids]), seed, np.arange(len(ids))[None, :])
        hidden_input = (mtp.get("inputs") or {}).get("hidden_states", "hidden_states")
        got = head.run(ids, {hidden_input: seed})
        got_logits = got[head.outputs.get("logits", "logits")]
        if vocabulary is None:
            report.compare("mtp head logits", got_logits, want_logits, tolerance)
        else:
            kept = np.asarray(vocabulary.ids)
            report.compare("mtp head logits (draft vocabulary)", got_logits[..., kept], want_logits[..., kept], tolerance)
            others = np.delete(got_logits, kept, axis=-1)
            lowest = float(np.finfo(got_logits.dtype).min)
            report.agree("mtp head logits outside the draft vocabulary", bool(np.all(others == lowest)),
                         f"all {others.shape[-1]} per row are {lowest:g}" if np.all(others == lowest)
                         else f"{int(np.sum(others != lowest))} of them are not {lowest:g}")
        hidden_out = (mtp.get("outputs") or {}).get("hidden_states", "hidden_states_out")
        if hidden_out in got:
            report.compare("mtp head hidden state", got[hidden_out], want_hidden, tolerance)
    if sidecar and arch.mtp_num_layers > 0:
        _check_sidecar(root, sidecar, prompt, step_token, ref_seed, arch, weights, report, tolerance, progress)
    compare_vision(root, ir, weights, report, tolerance, progress)

    _decode(root, cfg, prompt, options, report, reference, strict, progress)


def _speculator(root: Path) -> dict | None:
    """The onnx-genai SpeculatorConfig: config.json's, or the `speculative` block of a package from before mtpc
    declared it there (onnx-genai's flat layout of 5a12882)."""
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
    from ..ir import SeedHidden
    from ..reference.forward import MtpHeadReference

    progress(f"running {speculator['model']} on onnxruntime")
    kv = {"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    present = {"present_key_names": "present.%d.key", "present_value_names": "present.%d.value"}
    runner = GraphRunner(root / speculator["model"], kv, present, 1, arch.head_dim)
    ids = list(prompt[1:]) + [step_token]
    embeds = np.asarray(weights.read_float("embed_tokens.weight"))[ids][None]
    seed = np.asarray(seed, np.float64)
    # onnx-genai applies the target's LM head to mtp_hidden: the head's post-norm output, whatever seeds it.
    head = MtpHeadReference(arch, weights, seed_hidden=SeedHidden.POST_NORM)
    _, want_hidden, _ = head.forward(np.asarray([ids]), seed, np.arange(len(ids))[None, :])
    got = runner.run(ids, {"inputs_embeds": embeds, "hidden_states": seed})
    report.compare("onnx-genai head hidden state", got[speculator["mtp_hidden_output"]], want_hidden, tolerance)


def _decode(root, cfg, prompt, options, report: Report, reference, strict: bool, progress) -> None:
    import onnxruntime_genai as og

    from ..profiles.ort_genai import text_view_config

    max_length = len(prompt) + options.new_tokens
    progress("greedy decoding with onnxruntime-genai")
    report.steps.append("onnxruntime-genai")
    with runtime_step("onnxruntime-genai greedy decoding failed"):
        model = og.Model(text_view_config(og, root))
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
        report.notes.append(f"greedy tokens differ from the reference ({_why_tokens_differ(report)}): "
                            f"{report.greedy} vs {report.reference_greedy}")

    head_dir = head_folder(root, cfg)
    if head_dir is None:
        if (cfg.get("model") or {}).get("mtp"):
            report.notes.append("no folder with the head's own genai_config.json: speculative decoding not run")
        return
    progress(f"MTP speculative decoding ({options.draft_tokens} draft tokens)")
    with runtime_step("onnxruntime-genai MTP speculative decoding failed"):
        head = og.Model(str(head_dir))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max_length, do_sample=False)
        params.set_speculative_options(max_draft_tokens=options.draft_tokens)
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
