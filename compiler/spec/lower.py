"""A loaded spec -> the typed IR. The only place after the loader that reads the spec's dicts.

Order: the rules JSON Schema cannot say (all reported together), then the
source is described (metadata only), then the spec's overrides and choices are
applied. Anything the source reports is re-anchored at the spec's `source`
node, so the user sees which line of the spec led there.
"""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable

from .. import sources
from ..ir.contracts import main_decoder_config
from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from ..ir import (
    Architecture,
    HeadPolicy,
    HubRef,
    ModelIR,
    MtpSettings,
    Precision,
    QuantizationPlan,
    QuantOverride,
    QuantScheme,
    SeedHidden,
    SourceRef,
)
from ..sources.info import SourceInfo
from ..schema.validation import load_schema
from ..weights import canonical_shapes, presets
from . import borrowed_weights, rules
from .defaults import apply_defaults
from .draft_options import draft_options
from .loader import by_position
from .loaded import LoadedSpec
from ..util.suggest import closest, path_hint
from .synthetic_settings import synthetic_spec
from .targets import targets_of


def lower(spec: LoadedSpec, *, source_files: bool = False, progress: Callable[[str], None] = lambda message: None
          ) -> tuple[ModelIR, SourceInfo]:
    """`source_files`: also make local what compile reads (a hub source's files, downloaded with `progress`)
    and the files the source builds on demand (its tokenizer's) now, so that a refusal of them is reported as
    the description's are, at the spec's `source` (compile asks; the metadata verbs leave them unmade)."""
    filled = _ruled(spec)
    ref, pairing_notes = _source_ref(spec, filled["source"], filled["mtp"]["head"])
    info = _describe(spec, ref, files=source_files, progress=progress)
    architecture = _override_architecture(spec, info.architecture)
    precision = Precision(io_dtype=filled["precision"]["io_dtype"])
    targets = targets_of(filled["targets"])
    provider = targets.onnxruntime_genai.execution_provider if targets.onnxruntime_genai else "cpu"
    mtp = filled["mtp"]
    draft_vocabulary, own_lm_head = draft_options(spec, mtp, info, architecture)
    ir = ModelIR(
        name=filled["name"],
        spec_path=str(spec.path),
        source=ref,
        architecture=architecture,
        mtp=MtpSettings(
            head=HeadPolicy(mtp["head"]),
            num_speculative_tokens=mtp["num_speculative_tokens"],
            # Unset: the convention the checkpoint's authors serve its head with (the source says which).
            seed_hidden=SeedHidden(mtp["seed_hidden"]) if "seed_hidden" in (spec.data.get("mtp") or {})
            else architecture.mtp_seed_hidden,
            draft_vocabulary=draft_vocabulary,
            own_lm_head=own_lm_head,
        ),
        precision=precision,
        quantization=_quantization(filled["quantization"], architecture, targets),
        targets=targets,
        main=main_decoder_config(architecture, precision, execution_provider=provider),
        notes=info.notes + pairing_notes + _tokenizer_notes(ref, info),
        source_tensors=info.tensors,
    )
    borrowed, notes = borrowed_weights.check(spec, ir)
    problems = _unmatched_overrides(spec, ir) + borrowed + _onnx_genai_tokenizer(spec, ir, info)
    if problems:
        raise MtpcError(by_position(problems), ExitCode.FINDINGS)
    return replace(ir, notes=ir.notes + notes), info


def _ruled(spec: LoadedSpec) -> dict:
    """The spec with the schema's defaults filled in, once every rule JSON Schema cannot say holds."""
    filled = apply_defaults(load_schema("spec"), spec.data)
    problems = rules.check(spec, filled)
    if problems:
        raise MtpcError(by_position(problems), ExitCode.FINDINGS)
    return filled


def check_without_source(spec: LoadedSpec) -> None:
    """What lowering checks before it opens the source: the cross-field rules and the targets, each runtime's
    limits included (`mtpc check --offline`). What needs the checkpoint (its sizes and tensors, which
    quantization overrides match, whether it ships a head) and the package built from it is left out."""
    targets_of(_ruled(spec)["targets"])


SOURCE_KINDS = ("synthetic", "hf", "gguf")


def source_kind(source: dict) -> tuple[str, object]:
    """The kind of a schema-valid `source` and its value (a `revision` or `head` may stand beside it)."""
    kind = next(k for k in SOURCE_KINDS if k in source)
    return kind, source[kind]


def _source_ref(spec: LoadedSpec, source: dict, head_policy: str) -> tuple[SourceRef, tuple[str, ...]]:
    """The source, and what the user should know about the GGUF head file paired with a target (`_paired`)."""
    kind, value = source_kind(source)
    if kind == "synthetic":
        assert isinstance(value, dict)
        return SourceRef("synthetic", seed=value["seed"], synthetic=synthetic_spec(value)), ()
    ref = _checkpoint_ref(spec, kind, value, source.get("revision"))
    return _paired(spec, ref, source.get("head"), head_policy) if kind == "gguf" else (ref, ())


def _checkpoint_ref(spec: LoadedSpec, kind: str, value: object, revision: str | None) -> SourceRef:
    if isinstance(value, dict):  # gguf: {repo, file}
        return SourceRef("gguf", hub=HubRef(value["repo"], revision, file=value["file"]))
    assert isinstance(value, str)
    path = (spec.folder / value).resolve()
    wanted = "folder" if kind == "hf" else "file"
    right_kind = _is(spec, ("source", kind), path, wanted, f"{kind} source '{value}'")
    if right_kind:
        if revision is not None:
            raise MtpcError([spec.diagnostic(
                ("source", "revision"), f"source.revision names a revision of a repo on the Hugging Face Hub, and "
                f"{kind} source '{value}' is a {wanted} beside the spec", at="key",
                hint="drop source.revision, or name the repo (owner/name) to read it from the hub")], ExitCode.FINDINGS)
        return SourceRef(kind, path=str(path))
    hub = None if path.exists() else _hub_ref(kind, value, revision)
    if hub is not None:
        return SourceRef(kind, hub=hub)
    problem = f"is not a {wanted}" if path.exists() else "does not exist"
    near = None if path.exists() else path_hint(value, spec.folder)
    repo = "owner/name" if kind == "hf" else "owner/name[:QUANT]"
    raise MtpcError(
        [
            spec.diagnostic(
                ("source", kind),
                f"{kind} source '{value}' {problem}",
                hint=(f"{near} " if near else "") + f"the {kind} source is a {wanted}, relative to the folder of the "
                f"spec file, or a repo on the Hugging Face Hub, {repo}",
            )
        ],
        ExitCode.USAGE,
    )


def _is(spec: LoadedSpec, at: tuple, path: Path, wanted: str, what: str) -> bool:
    """Whether `path` is a `wanted` ("file" / "folder"); a name no file system can hold is exit 2 at `at`
    (pathlib raises ENAMETOOLONG rather than answer no)."""
    try:
        return path.is_dir() if wanted == "folder" else path.is_file()
    except OSError as err:
        raise MtpcError([spec.diagnostic(at, f"{what} cannot be a path: {err.strerror}")], ExitCode.USAGE) from None


def _existing(spec: LoadedSpec, at: tuple, value: str, wanted: str, noun: str, about: str) -> Path:
    """`value` resolved against the spec's folder: a `wanted` ("file" / "folder") there, else exit 2 at `at`."""
    path = (spec.folder / value).resolve()
    if not _is(spec, at, path, wanted, f"{noun} '{value}'"):
        problem = f"is not a {wanted}" if path.exists() else "does not exist"
        near = None if path.exists() else path_hint(value, spec.folder)
        raise MtpcError(
            [spec.diagnostic(at, f"{noun} '{value}' {problem}",
                             hint=(f"{near} " if near else "") + f"{about}, relative to the folder of the spec file")],
            ExitCode.USAGE,
        )
    return path


def _paired(spec: LoadedSpec, ref: SourceRef, head: str | None, head_policy: str) -> tuple[SourceRef, tuple[str, ...]]:
    """A GGUF target's MTP head file (`sources/gguf/siblings.py`): the one `source.head` names; none with `off`; else
    an `mtp-` file beside the target that holds its head, as llama.cpp's runtime pairs one (unless `mtp.head: off`)."""
    from ..sources.gguf import siblings

    if ref.hub is not None:
        return _hub_paired(spec, ref, head, head_policy)
    try:
        if head == "off":
            return ref, siblings.unread_siblings(ref.path)
        if head is not None:
            path = _existing(spec, ("source", "head"), head, "file", "MTP head file",
                             "source.head names the GGUF file of the target's MTP head (llama.cpp's `--mtp` output)")
            return replace(ref, head=str(path)), ()
        if head_policy == "off":
            return ref, ()
        pairing = siblings.auto_pair(ref.path)
        return replace(ref, head=pairing.head), pairing.notes
    except MtpcError as err:
        raise _anchored_at(spec, ("source", "gguf"), err) from err


def _hub_paired(spec: LoadedSpec, ref: SourceRef, head: str | None, head_policy: str) -> tuple[SourceRef, tuple[str, ...]]:
    """A hub target's head file: of its repo and revision (`sources/hub/gguf_head.py`)."""
    from ..sources.hub.checkpoints import with_head

    try:
        return with_head(ref, head, head_policy)
    except MtpcError as err:
        raise _anchored_at(spec, _refused_at(spec, err), err) from err


def hub_source(spec: LoadedSpec) -> HubRef | None:
    """The hub repo a schema-valid spec's source names, or None for a synthetic or local one (or a local path
    that does not exist): `_source_ref`'s choice, made without opening anything."""
    source = spec.data["source"]
    kind, value = source_kind(source)
    if kind == "synthetic":
        return None
    if isinstance(value, dict):
        return HubRef(value["repo"], source.get("revision"), file=value["file"])
    assert isinstance(value, str)
    return None if (spec.folder / value).exists() else _hub_ref(kind, value, source.get("revision"))


def _hub_ref(kind: str, value: str, revision: str | None) -> HubRef | None:
    """The hub repo a value that is no local path names, or None: `owner/name` for hf, `owner/name[:QUANT]` for
    gguf (a value ending in .gguf is always a file)."""
    from ..sources.hub.ids import is_repo_id, split_quant_tag

    if kind == "hf":
        return HubRef(value, revision) if is_repo_id(value) else None
    split = None if value.endswith(".gguf") else split_quant_tag(value)
    return None if split is None else HubRef(split[0], revision, quant=split[1])


def _describe(spec: LoadedSpec, ref: SourceRef, *, files: bool, progress: Callable[[str], None]) -> SourceInfo:
    try:
        info = sources.describe(ref)
        if files:
            sources.fetch(ref, info, progress)
            info.tokenizer_files  # noqa: B018  (made and checked now; kept by the description)
            if info.weight_checks is not None:
                info.weight_checks()
        return info
    except MtpcError as err:
        neither = _neither_path_nor_repo(spec, ref, err)
        if neither is not None:
            raise neither from err
        raise _anchored_at(spec, _refused_at(spec, err), err) from err


def _refused_at(spec: LoadedSpec, err: MtpcError) -> tuple:
    """A head file named in the spec is where its refusal points; one paired from beside the target, and what the
    hub refuses (the repo's, whichever file was asked for), the target."""
    from ..sources.hub.errors import HubFailure

    named_head = spec.get(("source", "head")) not in (None, "off")
    return ("source", "head") if named_head and not isinstance(err, HubFailure) else ("source", source_kind(spec.data["source"])[0])


def _anchored_at(spec: LoadedSpec, at: tuple, err: MtpcError) -> MtpcError:
    anchor = spec.diagnostic(at, "")
    return MtpcError([_anchored(d, anchor) for d in err.diagnostics], err.exit_code)


def _neither_path_nor_repo(spec: LoadedSpec, ref: SourceRef, err: MtpcError) -> MtpcError | None:
    """A value that names no path beside the spec and no repo the hub resolves (it does not exist there, or no
    hub could be asked): said as the missing path it may well be, with what the hub answered, as
    transformers' `from_pretrained` says of a name that is neither a folder nor a model id."""
    from ..sources.hub.errors import HubFailure

    value = spec.get(("source", ref.kind))
    if ref.hub is None or not isinstance(value, str) or not (isinstance(err, HubFailure) and err.unresolved):
        return None
    near = path_hint(value, spec.folder)
    message = f"{ref.kind} source '{value}' does not exist beside the spec, nor as a repo on the hub ({err.diagnostics[0].message})"
    wanted = "folder" if ref.kind == "hf" else "file"
    repo = "owner/name" if ref.kind == "hf" else "owner/name[:QUANT]"
    hint = (f"{near} " if near else "") + f"the {ref.kind} source is a {wanted}, relative to the folder of the spec file, " \
        f"or a repo on the Hugging Face Hub, {repo}"
    return MtpcError([spec.diagnostic(("source", ref.kind), message, hint=hint)], ExitCode.USAGE)


def _anchored(found: Diagnostic, anchor: Diagnostic) -> Diagnostic:
    if found.span is not None:
        return found
    message = found.message
    if found.path and found.path not in message:
        message = f"{found.path}: {message}"
    return replace(found, message=message, span=anchor.span, source_line=anchor.source_line)


def _override_architecture(spec: LoadedSpec, architecture: Architecture) -> Architecture:
    overrides = spec.get(("architecture",), {})
    if "context_length" in overrides:
        architecture = replace(architecture, context_length=overrides["context_length"])
    tokens = overrides.get("tokens", {})
    if tokens:
        eos = tokens.get("eos", architecture.tokens.eos)
        eos = (eos,) if isinstance(eos, int) else tuple(eos)
        architecture = replace(architecture, tokens=replace(architecture.tokens, **{**tokens, "eos": eos}))
        outside = [
            spec.diagnostic(
                ("architecture", "tokens", name),
                f"token id {max(ids)} is outside the vocabulary (the source's vocab_size is {architecture.vocab_size})",
            )
            for name, ids in (("bos", (architecture.tokens.bos,)), ("eos", eos), ("pad", (architecture.tokens.pad,)))
            if name in tokens and max(ids) >= architecture.vocab_size
        ]
        if outside:
            raise MtpcError(outside, ExitCode.FINDINGS)
    return architecture


def _scheme(written: dict, inherited: QuantScheme) -> QuantScheme:
    accuracy = written.get("accuracy_level", inherited.accuracy_level)
    keeps = written.get("keep") == "source" or (inherited.keep_source and "bits" not in written)
    if keeps:
        return QuantScheme(keep_source=True, accuracy_level=accuracy)
    return QuantScheme(
        bits=written.get("bits", inherited.bits),
        block_size=written.get("block_size", inherited.block_size),
        accuracy_level=written.get("accuracy_level", inherited.accuracy_level),
        symmetric=written.get("symmetric", inherited.symmetric),
    )


def _quantization(quantization: dict, architecture: Architecture, targets) -> QuantizationPlan:
    written = quantization["default"]
    default, preset_overrides, label = _scheme(written, QuantScheme()), (), ""
    if "preset" in written:
        default, preset_overrides, label = presets.expand(
            written["preset"], architecture, accuracy_level=written.get("accuracy_level"),
            float_embedding=targets.onnx_genai is not None, existing=set(canonical_shapes(architecture)))
    # The spec's own overrides first: they win over what the preset decided.
    overrides = tuple(QuantOverride(o["match"], _scheme(o, default)) for o in quantization["overrides"])
    return QuantizationPlan(default=default, overrides=overrides + preset_overrides, default_label=label)


def _unmatched_overrides(spec: LoadedSpec, ir: ModelIR) -> list[Diagnostic]:
    """An override whose glob matches no weight is a typo that silently changes nothing."""
    names = sorted([*canonical_shapes(ir.architecture), *(("mtp.lm_head.weight",) if ir.mtp.own_lm_head else ())])
    out = []
    for i, override in enumerate(o for o in ir.quantization.overrides if not o.label):  # the spec's, in its order
        if any(fnmatchcase(name, override.match) for name in names):
            continue
        guess = closest(override.match, names)
        hint = f"did you mean '{guess}'?" if guess else None
        if ir.architecture.has_mtp_head and fnmatchcase("mtp.lm_head.weight", override.match):
            hint = "mtp.lm_head.weight is the head's own LM head: it exists with mtp.lm_head: own or a draft_vocabulary"
        if hint is None:
            hint = "globs match canonical weight names such as embed_tokens.weight, layers.0.mlp.up_proj.weight"
            hint += ", mtp.fc.weight" if ir.architecture.has_mtp_head else " (this source has no mtp.* weights)"
        out.append(
            spec.diagnostic(
                ("quantization", "overrides", i, "match"),
                f"override '{override.match}' matches no weight of this model",
                hint=hint,
            )
        )
    return out


_TOKENIZER_HINTS = {
    "hf": "put the checkpoint's tokenizer.json (and tokenizer_config.json) beside its weights, or list only "
          "onnxruntime_genai under targets",
    "gguf": "use a GGUF with a gpt2 (byte-level BPE) tokenizer or an embedded tokenizer.huggingface.json, or list "
            "only onnxruntime_genai under targets",
}


def _onnx_genai_tokenizer(spec: LoadedSpec, ir: ModelIR, info: SourceInfo) -> list[Diagnostic]:
    """onnx-genai's Engine::from_dir refuses a folder without tokenizer.json (ModelDirectory::load_flat), where
    onnxruntime-genai still runs on token ids: an onnx_genai target needs a source mtpc gets one from."""
    if ir.targets.onnx_genai is None or ir.source.kind == "synthetic" or "tokenizer.json" in info.tokenizer_names:
        return []
    ships = (f"ships no tokenizer.json (only {', '.join(info.tokenizer_names)})" if info.tokenizer_names
             else "gives mtpc no tokenizer.json")
    message = f"the source {ships}, and onnx-genai's Engine::from_dir refuses a package without one"
    if spec.get(("targets", "onnx_genai")) is not None:
        return [spec.diagnostic(("targets", "onnx_genai"), f"{message}: the onnx_genai target cannot be built", at="key",
                                hint=_TOKENIZER_HINTS[ir.source.kind])]
    return [spec.diagnostic(("source", ir.source.kind), f"{message}, and targets omitted builds the onnx_genai target too",
                            at="key", hint=_TOKENIZER_HINTS[ir.source.kind])]


def _tokenizer_notes(ref: SourceRef, info: SourceInfo) -> tuple[str, ...]:
    # A synthetic source gets a generated tokenizer from the tokenizer emitter.
    if ref.kind == "synthetic" or "tokenizer.json" in info.tokenizer_names:
        return ()
    if not info.tokenizer_names:
        return (
            "the source ships no tokenizer files: the package has none; onnxruntime-genai needs "
            "tokenizer.json to encode text (token ids still work)",
        )
    return (
        f"the source's tokenizer files ({', '.join(info.tokenizer_names)}) include no tokenizer.json: "
        "onnxruntime-genai needs it to encode text (token ids still work)",
    )
