"""Cross-artifact contract checks over a package (`mtpc check`, and compile's gate before it writes).

A schema says whether one file is well formed; these checks say whether the
files of a package agree with each other and with their ONNX graphs: every
tensor name a config mentions exists in the graph it names, the MTP head's
hidden-state input matches the main model's output (dtype, width, rank), the
initializers a sidecar borrows exist in the target graph in a form its runtime
accepts, every file a config points at is a relative path inside the package,
and every external-data file a graph points at is long enough to hold the
tensors it is said to hold.

Every check runs and every finding is collected before anything is reported,
so one run shows everything that is wrong. Graphs are read without their
external data: only names, dtypes and shapes are needed, and a data file is
measured by its size, never read.

- `package`: the files, the findings and the checker (external data included);
- `graphs`: what a graph holds, read without its weights;
- `genai_config`: onnxruntime-genai's configs against their graphs;
- `onnx_genai`: onnx-genai's metadata against its graphs, as its loader routes the package;
- `onnx_genai_sidecar`: the MTP sidecar's declaration (`config.json`) against both graphs;
- `quantization`: `quantization.json`'s summary against its own weight list;
- `completeness`: every file the package's runtimes need is there;
- `manifest`: every file `manifest.json` lists is there, as long as it was written, with its sha256;
- `positions`: the line a finding's JSON pointer sits on, in a JSON or YAML file.

A finding is an error (the check fails) or a warning (reported; the package runs, with a gap:
no tokenizer, so token ids only).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ..emit.genai_config import CONFIG_NAME as GENAI_CONFIG
from ..emit.inference_metadata import CONFIG_FILE as HF_CONFIG, METADATA_FILE as INFERENCE_METADATA
from ..emit.quantization_report import REPORT_NAME as QUANTIZATION_REPORT
from ..emit.provenance_record import PROVENANCE_NAME
from ..emit.manifest import MANIFEST_NAME
from .genai_config import (
    check_genai_config, check_head_folder, check_runtime_keys, check_shared_initializers, runtime_profile,
)
from .onnx_genai import LAYOUT_SCHEMAS, check_onnx_genai
from .completeness import check_onnxruntime_genai_files
from .manifest import check_manifest
from .quantization import check_quantization_report
from .vision import TEXT_OVERLAY, check_vision, text_view
from .package import Checker, Files, Finding, PackageFile, artifact_files, check_tokenizer, folder, package_directory

__all__ = [
    "GENAI_CONFIG", "SCHEMAS", "Files", "Finding", "PackageFile",
    "artifact_files", "check_files", "check_package", "is_runtime_package", "package_directory", "schema_for",
]


# The schema in schemas/ each package file must satisfy, by file name and, for onnx-genai's
# metadata, layout. The emitters declare the same schema on the artifacts they write
# (tests/checks/test_checks.py holds the two together).
SCHEMAS: dict[tuple[str, str | None], str] = {
    (GENAI_CONFIG, None): "genai_config.schema.json",
    **{(INFERENCE_METADATA, layout): schema for layout, schema in LAYOUT_SCHEMAS.items()},
    (HF_CONFIG, None): "speculator_config.schema.json",
    (QUANTIZATION_REPORT, None): "quantization.schema.json",
    (PROVENANCE_NAME, None): "provenance.schema.json",
    (MANIFEST_NAME, None): "manifest.schema.json",
}


def schema_for(file_name: str, layout: str | None = None) -> str | None:
    """The schema for a package file (`layout`: "flat" / "workflow", for the onnx-genai metadata only)."""
    return SCHEMAS.get((file_name, layout))


# ----------------------------------------------------------------------------- entry point


def is_runtime_package(path: Path) -> bool:
    """A folder a runtime can load: it holds a genai_config.json or an onnx-genai metadata file."""
    return path.is_dir() and any((path / n).is_file() for n in (GENAI_CONFIG, INFERENCE_METADATA))


def check_package(root: str | Path) -> list[Finding]:
    """All findings about the package in directory `root`, sorted; empty when it is sound."""
    return check_files(package_directory(root))


def check_files(files: Files) -> list[Finding]:
    """All findings about a package given as relpath -> bytes reader, sorted."""
    c = Checker(files)
    configs = sorted(rel for rel in files if PurePosixPath(rel).name == GENAI_CONFIG)
    parsed = {}
    for rel in configs:
        cfg = c.parse(rel)
        if cfg is None:
            continue
        c.validate(rel, cfg, schema_for(GENAI_CONFIG))
        if isinstance(cfg, dict):
            parsed[rel] = cfg
    profile = None
    if parsed:
        profile = runtime_profile(c, c.parse(PROVENANCE_NAME) if PROVENANCE_NAME in files else None)
        for rel, cfg in parsed.items():
            if profile is not None:
                check_runtime_keys(c, rel, cfg, profile)
    root_main = root_head = None
    for rel, cfg in parsed.items():
        main, head = check_genai_config(c, rel, cfg)
        if rel == GENAI_CONFIG:
            root_main, root_head = main, head
    # A multimodal package: its pipeline's contracts, and its text view (the overlay) checked as a config of its own,
    # which the head's folder pairs with.
    paired_rel, paired_cfg, paired_main = GENAI_CONFIG, parsed.get(GENAI_CONFIG), root_main
    if paired_cfg is not None:
        check_vision(c, GENAI_CONFIG, paired_cfg, root_main)
        text = text_view(c, paired_cfg, profile)
        if text is not None:
            text_main, text_head = check_genai_config(c, TEXT_OVERLAY, text)
            if text_main is not None and text_head is not None:
                c.shared_bytes(text_main, text_head)
            paired_rel, paired_cfg, paired_main = TEXT_OVERLAY, text, text_main
    for rel, cfg in parsed.items():
        check_shared_initializers(c, rel, cfg, root_main)
    if root_main is not None and root_head is not None:
        c.shared_bytes(root_main, root_head)
    if root_head is not None:
        for rel, cfg in parsed.items():
            if rel == GENAI_CONFIG:
                continue
            dec = (cfg.get("model") or {}).get("decoder") or {}
            filename = dec.get("filename")
            if isinstance(filename, str) and str(PurePosixPath(folder(rel)) / filename) == root_head.relpath:
                check_head_folder(c, rel, cfg, paired_rel, paired_cfg, paired_main)

    check_onnxruntime_genai_files(c, parsed)

    check_onnx_genai(c)
    # Optional: no runtime reads it, and packages from before mtpc wrote it have none. Every package
    # mtpc writes now has one (the golden tests hold that); when present it must be sound.
    if QUANTIZATION_REPORT in files:
        report = c.parse(QUANTIZATION_REPORT)
        if report is not None:
            c.validate(QUANTIZATION_REPORT, report, schema_for(QUANTIZATION_REPORT))
            check_quantization_report(c, QUANTIZATION_REPORT, report)
    if PROVENANCE_NAME in files:  # optional like the report: packages from before mtpc wrote it have none
        provenance = c.parse(PROVENANCE_NAME)
        if provenance is not None:
            c.validate(PROVENANCE_NAME, provenance, schema_for(PROVENANCE_NAME))
    check_tokenizer(c)
    # Every graph's external data, whether or not a config names the graph: a copy that lost or cut
    # short a data file is broken all the same.
    for rel in sorted(files):
        if rel.endswith(".onnx"):
            c.graph(rel, "", rel)
    # Last: a file the manifest lists that another check has already said is missing is said once.
    check_manifest(c, schema_for(MANIFEST_NAME))
    return c.result()
