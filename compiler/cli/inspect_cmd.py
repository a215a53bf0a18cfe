"""`mtpc inspect SOURCE`: what a GGUF file or Hugging Face checkpoint holds. Metadata only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..util.diagnostics import ExitCode, MtpcError
from .report import err, verb_parser, out, print_json

if TYPE_CHECKING:
    from ..ir import SourceRef

HELP = "describe a GGUF file or Hugging Face checkpoint: architecture, dims, layer kinds, storage, MTP head"
EPILOG = """\
Reads metadata only (the GGUF header, or config.json and the safetensors
headers), so it answers instantly whatever the checkpoint's size; the
tokenizer files are listed, and read and checked by compile. Exits 1
with a finding for what compile would refuse: a checkpoint's tensors that
contradict its config.json, or a declared MTP head that is broken (some of its
tensors missing, a GGUF head block that is not in the file, more than one
block, unknown head tensors); 2 when the checkpoint cannot be read. A head
whose weights are all absent from an HF folder (transformers drops them when
it re-saves a model) is not a finding: compile builds text only, with a note.

A hub repo (owner/name, owner/name:QUANT, --revision) is read through huggingface_hub:
config.json and each shard's header by range request (a GGUF's header alone), so
nothing the size of a weight is downloaded; with HF_HUB_OFFLINE=1, from the cache only.

examples:
  mtpc inspect models/Qwen3.5-0.8B-Q4_0.gguf
  mtpc inspect Qwen/Qwen3.5-0.8B                # on the hub: config.json and the headers, by range request
  mtpc inspect ggml-org/GLM-4.7-Flash-GGUF:Q4_K_M --revision main
  mtpc inspect models/qwen3.5-0.8b/          # config.json + *.safetensors
  mtpc inspect ckpt/ --format json | jq .has_mtp_head
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "inspect", HELP, EPILOG)
    p.add_argument("source", metavar="SOURCE",
                   help="a .gguf file, a checkpoint directory with config.json, or a repo on the Hugging Face Hub: "
                   "owner/name (safetensors or GGUF), owner/name:QUANT (a GGUF file by its quant tag)")
    p.add_argument("--revision", metavar="REV",
                   help="for a hub repo: the branch, tag or commit to read (default: its main branch)")
    p.set_defaults(run=run)


def source_ref(path: Path, revision: str | None = None) -> "SourceRef":
    from ..checks import is_runtime_package
    from ..ir import SourceRef

    if not path.exists():
        hub = _hub_ref(str(path), revision)
        if hub is not None:
            return hub
        from ..util.suggest import path_hint

        raise MtpcError.single(f"{str(path)!r} does not exist", exit_code=ExitCode.USAGE, hint=path_hint(path))
    if revision is not None:
        raise MtpcError.single(f"--revision is for a repo on the Hugging Face Hub; {str(path)!r} is on this machine",
                               exit_code=ExitCode.USAGE)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return SourceRef("gguf", str(path.resolve()))
    if is_runtime_package(path):
        # A package's config.json is onnx-genai's, not a checkpoint's: say what it is rather than what it lacks.
        raise MtpcError.single(
            f"{str(path)!r} is a compiled package, not a checkpoint",
            exit_code=ExitCode.USAGE,
            hint=f"this is a compiled package; use mtpc check {path} / mtpc verify {path} --spec SPEC",
        )
    if path.is_dir() and (path / "config.json").is_file():
        return SourceRef("hf", str(path.resolve()))
    raise MtpcError.single(
        f"{str(path)!r} is neither a .gguf file nor a checkpoint directory with config.json",
        exit_code=ExitCode.USAGE,
    )


def _hub_ref(text: str, revision: str | None) -> "SourceRef | None":
    """`owner/name` (safetensors or GGUF, as the repo holds) or `owner/name:QUANT` (GGUF) on the hub, else None."""
    from ..ir import HubRef, SourceRef
    from ..sources.hub.ids import split_quant_tag

    split = None if text.endswith(".gguf") else split_quant_tag(text)
    if split is None:
        return None
    repo, quant = split
    if quant is not None:
        return SourceRef("gguf", hub=HubRef(repo, revision, quant=quant))
    from ..sources.hub.checkpoints import repo_kind

    return SourceRef(repo_kind(HubRef(repo, revision)), hub=HubRef(repo, revision))


def run(args) -> int:
    from .. import sources
    from ..diffing.changes import to_plain
    from ..ir import HeadLayout

    ref = source_ref(Path(args.source), args.revision)
    info = sources.describe(ref)
    findings = _findings(ref, info)
    arch = info.architecture
    if args.format == "json":
        print_json(
            "inspect",
            {
                "source": {"kind": ref.kind, "path": ref.path, **({"hub": _hub_facts(ref)} if ref.hub else {})},
                "architecture": to_plain(arch),
                "has_mtp_head": info.has_mtp_head,
                "storage": dict(info.storage),
                "tokenizer_files": sorted(info.tokenizer_names),
                "facts": {k: list(v) if isinstance(v, tuple) else v for k, v in info.facts},
                "findings": findings,
            },
            ok=not findings,
        )
        return ExitCode.FINDINGS if findings else 0
    # Every value in one column, facts included: the column clears the longest key.
    width = max(len("architecture"), *(len(key) for key, _ in info.facts)) + 3

    def line(key: str, value) -> None:
        out(f"{key + ':':<{width}}{value}")

    line("source", f"{ref.kind} {_shown(ref)}")
    line("architecture", f"{arch.family}")
    line("layers", f"{arch.num_layers} ({arch.layer_kind_summary(word_separator='_')})")
    line("layer kinds", f"{' '.join(k.value.split('_')[0] for k in arch.layer_kinds)}")
    if arch.moe is None:
        line("hidden size", f"{arch.hidden_size}  (intermediate {arch.intermediate_size})")
    else:
        line("hidden size", f"{arch.hidden_size}")
        line("experts", arch.moe.summary())
    if arch.mla is not None:  # its one KV head is the cached latent, not a head of keys
        line("attention", f"{arch.num_attention_heads} heads, {arch.attention_summary()}")
    else:
        line("attention", f"{arch.num_attention_heads} heads, {arch.num_key_value_heads} kv heads, head dim {arch.head_dim}"
             + ("" if arch.attention_output_gate else f" ({arch.attention_summary()})"))
    if arch.linear_attention is not None:
        la = arch.linear_attention
        line(
            "linear attn",
            f"{la.num_key_heads} key heads x {la.key_head_dim}, {la.num_value_heads} value heads x "
            f"{la.value_head_dim}, conv kernel {la.conv_kernel}",
        )
    line("vocab", f"{arch.vocab_size}   context: {arch.context_length}")
    line("rope", f"theta {arch.rope.theta}, rotary dim {arch.rope.rotary_dim}, mrope {list(arch.rope.mrope_section)}"
         + (f", {arch.rope.yarn.summary()}" if arch.rope.yarn is not None else ""))
    trailing = arch.head_layout is HeadLayout.TRAILING_LAYER
    line("mtp head", f"{'yes, ' + str(arch.mtp_num_layers) + ' layer(s)' if info.has_mtp_head else 'no'}"
         + (f", a trailing decoder layer (block {arch.num_layers}, after the trunk)" if trailing and info.has_mtp_head else "")
         + (f"; the first of {arch.mtp_chained_layers} chained MTP layers (onnxruntime-genai drives one head graph)"
            if info.has_mtp_head and arch.mtp_chained_layers > arch.mtp_num_layers else ""))
    if arch.vision is not None:
        v = arch.vision
        line("vision tower", f"{v.tower.summary()}; image token {v.tokens.image}, vision start {v.tokens.vision_start}")
        line("image input", f"{v.preprocessing.min_pixels}..{v.preprocessing.max_pixels} pixels, mean "
                            f"{list(v.preprocessing.image_mean)}, std {list(v.preprocessing.image_std)}")
    if info.storage:
        out("storage:")
        for group, kind in info.storage:
            out(f"  {group}: {kind}")
    if info.tokenizer_names:
        line("tokenizer", f"{', '.join(sorted(info.tokenizer_names))}")
    for key, value in info.facts:
        line(key, ", ".join(value) if isinstance(value, tuple) else value)
    for finding in findings:
        err(f"error: {finding}")
    return ExitCode.FINDINGS if findings else 0


def _findings(ref: SourceRef, info) -> list[str]:
    """What `compile` would refuse in the checkpoint, from headers only: a declared MTP head that is broken
    (`sources/mtp_head.py`'s verdict: half present, a GGUF head block that is not there, more than one block,
    unknown head tensors), and an HF folder's tensor shapes against its config.json. A head whose weights are
    simply absent (transformers dropped them) is not one: compile builds text only, and `mtp_note` says why.

    A GGUF's tensors are checked against its metadata by `describe` itself (a `SourceError`).
    """
    found = []
    unusable = info.architecture.unusable_head
    if unusable is not None and not unusable.absent:
        found.append(f"{_shown(ref)}: the MTP head cannot be built: {unusable.reason}")
    if ref.kind == "hf":
        from ..sources.hf import reader as hf

        found += hf.check(ref, info)
    return found


def _hub_facts(ref: "SourceRef") -> dict:
    from ..sources.hub.checkpoints import file_of, resolve

    assert ref.hub is not None
    snapshot = resolve(ref.hub)
    return {"repo": ref.hub.repo, "revision": ref.hub.revision, "commit": snapshot.commit, "file": file_of(ref)}


def _shown(ref: "SourceRef") -> str:
    """The path, or for a hub repo `owner/name@commit` and the GGUF file read."""
    if ref.hub is None:
        return str(ref.path)
    from ..sources.hub.checkpoints import file_of, resolve

    file = file_of(ref)
    return f"{resolve(ref.hub).shown}" + (f" {file}" if file else "")
