"""What onnx-genai accepts, at the one commit mtpc's onnx-genai packages are checked against.

onnx-genai (github.com/justinchuby/onnx-genai) has no releases; its behaviour is pinned by
commit. Every fact below was read from its source at `COMMIT` and is held to its own code by
the tests: `ong-check` (../shared/conformance/onnx-genai-engine/) runs onnx-genai's metadata
crate and the engine's MTP validators on every package the tests compile
(tests/clients/onnx_genai.py).

Only one load path at that commit builds the MTP proposer from a package:
`Engine::from_dir` on the native decode backend calls `detect_speculator`, which reads
`config.json` -> `speculator_config` (crates/onnx-genai-engine/src/engine/load.rs:951, 2233-2310).
So the one layout mtpc emits is the shape that path loads (`flat`: no `pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..ir import OnnxGenaiTarget

COMMIT = "ac9c7dd067dd7ff620fbe27b38b524adfa6fd946"
SHORT_COMMIT = COMMIT[:7]

# Where the target's settings live in a spec.
TARGET_PATH = ("targets", "onnx_genai")


@dataclass(frozen=True)
class LayoutProblem:
    key: tuple[str, ...]  # relative to TARGET_PATH
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class OnnxGenaiProfile:
    commit: str
    # Layout -> None when onnx-genai loads a package of that layout with its MTP proposer, else why not.
    layouts: Mapping[str, str | None]
    # What `Engine::from_dir` admits (`admit_inference_metadata` with `RuntimeCapabilities::default()`,
    # onnx-genai-metadata/src/validation.rs:72-85): a package requiring anything else is refused.
    runtime_capabilities: tuple[str, ...]
    # `resolve_model_path` (onnx-genai-ort/src/loader.rs:803-830): the target graph is `decoder.onnx`,
    # else the package root's only `.onnx` file; a second root `.onnx` fails the load. Subfolders are
    # not scanned, so the MTP sidecar lives in a folder of its own.
    decoder_graph: str
    sidecar_folder: str

    @property
    def loadable_layouts(self) -> tuple[str, ...]:
        return tuple(name for name, refusal in self.layouts.items() if refusal is None)

    def target_problems(self, target: OnnxGenaiTarget) -> list[LayoutProblem]:
        refusal = self.layouts.get(target.layout, f"onnx-genai {SHORT_COMMIT} has no {target.layout!r} layout")
        if refusal is None:
            return []
        where = ".".join(TARGET_PATH + ("layout",))
        return [LayoutProblem(("layout",), f"{where} '{target.layout}' is refused: {refusal}",
                              f"use layout: {' or '.join(self.loadable_layouts)}")]


PROFILE = OnnxGenaiProfile(
    commit=COMMIT,
    layouts={
        # No `pipeline`, the decoder's ports in `model.io`, the sidecar declared in config.json.
        "flat": None,
        # A package with `pipeline` goes to the pipeline loader (PipelineModelDirectory, onnx-genai-ort/src/
        # loader.rs:314-415), which never reads config.json, and the pipeline engine refuses the native backend
        # where the MTP proposer lives (engine/src/pipeline/mod.rs:196-208); nothing reads the workflow's own
        # `speculative:` contract at run time.
        "workflow": (
            f"onnx-genai {SHORT_COMMIT} loads a workflow package (one with a `pipeline` section) through its pipeline "
            "loader, which never reads config.json's speculator_config, so the package would decode without its MTP "
            "head; and Engine::from_dir, which does read it, refuses any package with a pipeline"
        ),
    },
    runtime_capabilities=(
        "kv_cache", "grouped_query_attention", "multi_head_attention", "prefix_cache", "continuous_batching",
        "control_flow_loop",
    ),
    decoder_graph="decoder.onnx",
    sidecar_folder="mtp_sidecar",
)
