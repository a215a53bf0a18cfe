"""Whether a package holds every file its runtimes need, judged from the files it does hold.

A package names its targets by its configs: a root `genai_config.json` is onnxruntime-genai's,
an `inference_metadata.yaml` onnx-genai's. Each missing file is reported as a finding about that
file ("is missing: ..."), saying which file or section needs it:

- onnxruntime-genai: the root `genai_config.json` beside a head folder's; the head's own folder
  with its `genai_config.json` when `model.mtp` names a head (og.MtpGenerator loads the head as a
  model of its own); `tokenizer.json` with `tokenizer_config.json`, which og.Tokenizer reads
  together. A package without a tokenizer still runs on token ids (mtpc builds one from a source
  that ships none, and says so), so a missing tokenizer is a warning, not a failed check;
- onnx-genai: `inference_metadata.yaml` when the package carries onnx-genai's MTP sidecar or its
  declaration (it loads a package only through that file); for its `Engine::from_dir` (a package
  without `pipeline`), `tokenizer.json` (it refuses a folder without one) and `config.json` with
  `speculator_config` when the sidecar graph is there, since onnx-genai reads the sidecar's
  declaration from there alone (without it the model loads without speculation);
- every graph: its external data files, present and long enough (`Checker.external_data`).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ..emit.genai_config import CONFIG_NAME as GENAI_CONFIG
from ..emit.inference_metadata import CONFIG_FILE as HF_CONFIG, METADATA_FILE as INFERENCE_METADATA
from ..passes.mtp_projection import ONNX_GENAI_HEAD_FILENAME
from ..schema.validation import json_pointer
from .package import TOKENIZER_JSON, Checker, folder

SIDECAR_GRAPH = PurePosixPath(ONNX_GENAI_HEAD_FILENAME).name  # onnx-genai's MTP head as mtpc names it, in whichever folder
TOKENIZER_CONFIG = "tokenizer_config.json"


def check_onnxruntime_genai_files(c: Checker, configs: dict[str, dict]) -> None:
    """`configs`: every parsed genai_config.json of the package, by path."""
    if GENAI_CONFIG not in c.files:
        heads = sorted(rel for rel in configs if rel != GENAI_CONFIG)
        if heads:
            c.add(GENAI_CONFIG, "", f"is missing: {heads[0]} is a head folder's config, which onnxruntime-genai "
                                    "pairs with the main model's genai_config.json at the package root")
        return
    root = configs.get(GENAI_CONFIG)
    if root is not None:
        _head_folder(c, root, configs)
    _tokenizer(c)


def _head_folder(c: Checker, root: dict, configs: dict[str, dict]) -> None:
    mtp = (root.get("model") or {}).get("mtp") if isinstance(root.get("model"), dict) else None
    head = mtp.get("filename") if isinstance(mtp, dict) else None
    if not isinstance(head, str) or not head or head not in c.files:
        return  # no head, or one the config checks already report as missing
    for rel, cfg in configs.items():
        decoder = (cfg.get("model") or {}).get("decoder") if isinstance(cfg.get("model"), dict) else None
        filename = decoder.get("filename") if isinstance(decoder, dict) else None
        if rel != GENAI_CONFIG and isinstance(filename, str) and str(PurePosixPath(folder(rel)) / filename) == head:
            return
    where = json_pointer("model", "mtp", "filename")
    head_folder = folder(head)
    if not head_folder:
        c.add(GENAI_CONFIG, where, f"{head!r} sits at the package root, but og.MtpGenerator loads the head as a model "
                                   "of its own, from a folder holding the head and its genai_config.json")
        return
    expected = f"{head_folder}/{GENAI_CONFIG}"
    if expected in c.files:
        if expected not in configs:
            return  # unreadable: its parse finding says so
        c.add(expected, "", f"does not name the head {head!r} as its decoder, which {GENAI_CONFIG}'s model.mtp.filename does")
    else:
        c.add(expected, "", f"is missing: {GENAI_CONFIG}'s model.mtp names the head {head!r}, and og.MtpGenerator "
                            f"loads the head as a model of its own, from {expected}")


def _tokenizer(c: Checker) -> None:
    from ..sources.tokenizer_json import TOKENIZER_FILES

    present = [name for name in TOKENIZER_FILES if name in c.files]
    if not present:
        c.add(TOKENIZER_JSON, "", "is missing, with every other tokenizer file: onnxruntime-genai runs the package on "
                                  "token ids, but og.Tokenizer cannot encode or decode text",
              severity="warning", hint="compile from a source that ships tokenizer.json and tokenizer_config.json")
        return
    for name in (TOKENIZER_JSON, TOKENIZER_CONFIG):
        if name not in c.files:
            c.add(name, "", f"is missing: og.Tokenizer reads {TOKENIZER_JSON} and {TOKENIZER_CONFIG} together "
                            f"(the package has {', '.join(present)}); token ids still work", severity="warning")


def check_onnx_genai_files(c: Checker, metadata_doc, layout: str | None, speculator) -> None:
    """`metadata_doc`: the parsed inference_metadata.yaml (None when absent or unreadable); `layout`: its
    route ("flat" / "workflow"); `speculator`: config.json's `speculator_config` (None when there is none)."""
    sidecars = sorted(rel for rel in c.files if PurePosixPath(rel).name == SIDECAR_GRAPH)
    if INFERENCE_METADATA not in c.files:
        why = (f"{HF_CONFIG} declares an MTP sidecar (speculator_config)" if speculator is not None
               else f"{sidecars[0]} is onnx-genai's MTP head" if sidecars else None)
        if why is not None:
            c.add(INFERENCE_METADATA, "", f"is missing: {why}, and onnx-genai loads a package only through its {INFERENCE_METADATA}")
        return
    if layout != "flat":
        return
    if TOKENIZER_JSON not in c.files:
        c.add(TOKENIZER_JSON, "", f"is missing: onnx-genai's Engine::from_dir refuses a package without one beside {INFERENCE_METADATA}")
    if sidecars and speculator is None:
        why = (f"{sidecars[0]} is onnx-genai's MTP head, and onnx-genai reads its declaration only from {HF_CONFIG}'s "
               "speculator_config (without it the model loads without speculation)")
        c.add(HF_CONFIG, "", f"has no speculator_config: {why}" if HF_CONFIG in c.files else f"is missing: {why}")
