"""Which packages `mtpc tune` can run here, and what it needs to know about one.

A tunable package is an onnxruntime-genai package with an MTP head in a folder of its
own (what `og.MtpGenerator` loads), dense attention, and an execution provider this
onnxruntime-genai has. Everything else is refused before anything runs, each with the
reason and what to do instead (exit 2: the input is not something tune can use).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..checks import GENAI_CONFIG
from ..checks.vision import text_view_document
from ..util.diagnostics import ExitCode, MtpcError

TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class TunablePackage:
    root: Path
    head_dir: Path  # the head's own folder, with its genai_config.json
    main_hidden: str  # the main graph's hidden-state output the head is seeded from
    head_hidden: str  # the head's own hidden-state output, fed back for chained drafts
    hidden_size: int
    context_length: int
    max_draft_tokens: int | None  # speculative.max_draft_tokens as the package sets it
    providers: tuple[str, ...]  # execution providers the config asks for ("cpu" when none)
    eos_token_ids: frozenset[int] = frozenset()
    # W of the main graph's windowed linear-attention state (0: none): with W > 1, og.MtpGenerator crops a
    # partly accepted verify at 2 or more drafts instead of replaying it, and drafts at most W - 1 tokens.
    state_window: int = 0


# is_paged and head_folder read a package for `mtpc verify` too (mtpc.verification).
def is_paged(cfg: dict) -> bool:
    """A paged package (onnxruntime-genai's engine, packed inputs): CUDA only."""
    decoder = (cfg.get("model") or {}).get("decoder") or {}
    return "dynamic_batching" in (cfg.get("engine") or {}) or "block_table" in (decoder.get("inputs") or {})


def head_folder(root: Path, cfg: dict) -> Path | None:
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


def state_window(root: Path, cfg: dict) -> int:
    """W of the main graph's conv state when it is windowed (`[W, batch, conv_dim, K-1]`, rank 4), else 0: the
    shape onnxruntime-genai decides by (src/models/recurrent_state.cpp)."""
    import onnx

    from ..checks.genai_config import state_names

    decoder = (cfg.get("model") or {}).get("decoder") or {}
    conv = state_names(decoder, int(decoder.get("num_hidden_layers") or 0)).get("past_conv_names", [])
    if not conv or not decoder.get("filename"):
        return 0
    graph = onnx.load(str(root / decoder["filename"]), load_external_data=False).graph
    dims = next((v.type.tensor_type.shape.dim for v in graph.input if v.name in conv), ())
    return dims[0].dim_value if len(dims) == 4 else 0


def draft_note(root: Path) -> str | None:
    """What the package drafts with, where its model card says more than "the head" (a source with several chained
    MTP layers: `emit/model_card.py`'s `- drafts:` line)."""
    try:
        card = (root / "README.md").read_text("utf-8")
    except OSError:
        return None
    return next((line.removeprefix("- drafts: ") for line in card.splitlines() if line.startswith("- drafts: ")), None)


def providers(cfg: dict) -> tuple[str, ...]:
    options = (((cfg.get("model") or {}).get("decoder") or {}).get("session_options") or {}).get("provider_options") or []
    names = [name for entry in options if isinstance(entry, dict) for name in entry]
    return tuple(names) or ("cpu",)


def _usage(message: str, hint: str | None = None) -> MtpcError:
    return MtpcError.single(message, exit_code=ExitCode.USAGE, hint=hint)


def open_package(path: str | Path, needs_tokenizer: bool = True) -> TunablePackage:
    """The package at `path`, or the reason tune cannot run it here (exit 2). Decoding token ids
    (`mtpc.tuning.decode`) needs no tokenizer; tune encodes text prompts, so it does."""
    root = Path(path)
    if not root.exists():
        raise _usage(f"package {str(path)!r} does not exist", "give the folder `mtpc compile` wrote")
    if not root.is_dir():
        raise _usage(f"package {str(path)!r} is not a directory", "give the folder `mtpc compile` wrote")
    config = root / GENAI_CONFIG
    if not config.is_file():
        raise _usage(
            f"{str(path)!r} holds no {GENAI_CONFIG}: tune runs onnxruntime-genai packages",
            "give the folder `mtpc compile` wrote for a spec with targets.onnxruntime_genai",
        )
    try:
        # A multimodal package is tuned in its text view: og.MtpGenerator drafts there (passes/vision.py).
        cfg = text_view_document(root, json.loads(config.read_text("utf-8")))
        model = cfg["model"]
        decoder = model["decoder"]
    except (ValueError, KeyError, TypeError) as error:
        raise _usage(f"{config}: not a readable onnxruntime-genai config ({error})", f"mtpc check {path}") from None
    if "hidden_states" in (decoder.get("inputs") or {}):
        raise _usage(f"{str(path)!r} is the MTP head's folder; pass the package root", f"mtpc tune {root.resolve().parent}")
    if is_paged(cfg):
        raise _usage(
            f"{str(path)!r} is a paged package: it runs on onnxruntime-genai's CUDA engine only, so tune cannot run it here",
            "tune a dense build of the same spec (targets.onnxruntime_genai.attention: dense) on this machine, "
            "or run tune where the package's runtime is",
        )
    mtp = model.get("mtp") or {}
    if not mtp.get("filename"):
        raise _usage(
            f"{str(path)!r} has no MTP head: there is no draft count to tune (it decodes with og.Generator)",
            "compile a spec whose source ships an MTP head (mtp.head: auto or on)",
        )
    head_dir = head_folder(root, cfg)
    if head_dir is None:
        raise _usage(
            f"{str(path)!r}: no folder holds the head's own {GENAI_CONFIG} ({mtp['filename']})",
            f"mtpc check {path}",
        )
    wanted = providers(cfg)
    missing = [name for name in wanted if not _available(name)]
    if missing:
        raise _usage(
            f"{str(path)!r} runs on the {', '.join(missing)} execution provider, which this onnxruntime-genai does not have",
            "run tune on the machine the package is for",
        )
    if needs_tokenizer and not (root / TOKENIZER_FILE).is_file():
        raise _usage(
            f"{str(path)!r} has no {TOKENIZER_FILE}: tune encodes the prompts with the package's tokenizer",
            "compile from a source that ships its tokenizer (an HF folder's tokenizer files, a GGUF's vocabulary)",
        )
    speculative = cfg.get("speculative") or {}
    return TunablePackage(
        root=root,
        head_dir=head_dir,
        main_hidden=mtp.get("main_hidden_states", "hidden_states"),
        head_hidden=(mtp.get("outputs") or {}).get("hidden_states", "hidden_states_out"),
        hidden_size=int(decoder["hidden_size"]),
        context_length=int(model.get("context_length") or (cfg.get("search") or {}).get("max_length") or 0),
        max_draft_tokens=speculative.get("max_draft_tokens"),
        providers=wanted,
        eos_token_ids=frozenset(eos if isinstance(eos := model.get("eos_token_id", []), list) else [eos]),
        state_window=state_window(root, cfg),
    )


def _available(provider: str) -> bool:
    if provider.lower() == "cpu":
        return True
    import onnxruntime_genai as og

    probe = getattr(og, f"is_{provider.lower()}_available", None)
    return bool(probe and probe())
