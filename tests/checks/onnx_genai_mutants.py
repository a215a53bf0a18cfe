"""Mutated onnx-genai metadata: one edit each to a package mtpc compiled, and what each checker says.

The corpus starts from the 17 edits of ../shared/conformance/onnx-genai-engine/MUTANTS.md, applied to
the layout mtpc emits now (the sidecar in mtp_sidecar/, no pipeline); MUTANTS.md's #16 needs a
workflow and is applied to the workflow package mtpc wrote before (16b is its flat analogue). The
rest are edits that take a package off onnx-genai's Engine::from_dir route or make onnx-genai drop the
sidecar's declaration without a word.

Each case says where `mtpc check` must report it (the file and the JSON pointer of the field edited,
or of the key that is missing) with a fragment of its message, and what onnx-genai's own checker
(ong-check) says about the same folder: a fragment of its error, or `None` where it passes the
folder, with the reason the two may differ (`why`).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.fixtures.package_files import remanifest

CONFIG = "config.json"
METADATA = "inference_metadata.yaml"
SIDECAR = "mtp_sidecar/mtp_sidecar.onnx"
# MUTANTS.md's "silently dropped" speculator_configs: ong-check reports the drop, which the engine does not.
DROPPED = "does not deserialize as SpeculatorConfig"


@dataclass(frozen=True)
class Mutant:
    id: str
    edit: str  # the edit, in words
    apply: Callable[[Path], None]
    file: str  # where mtpc check reports it ...
    pointer: str  # ... the field, as a JSON pointer into that file
    message: str  # a fragment of mtpc's message
    ong_check: str | None  # a fragment of ong-check's error; None: ong-check passes the folder (see `why`)
    base: str = "flat"  # "flat": the package mtpc compiles; "workflow": the one it compiled before issue 21
    why: str = ""  # why ong-check and mtpc may differ here


def _speculator(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(package: Path) -> None:
        path = package / CONFIG
        config = json.loads(path.read_text(encoding="utf-8"))
        edit(config["speculator_config"])
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return apply


def _metadata(edit: Callable[[str], str]) -> Callable[[Path], None]:
    def apply(package: Path) -> None:
        path = package / METADATA
        before = path.read_text(encoding="utf-8")
        after = edit(before)
        if after == before:
            raise AssertionError("the mutant's edit did not change the metadata")
        path.write_text(after, encoding="utf-8")
    return apply


def _set(**changes) -> Callable[[Path], None]:
    return _speculator(lambda block: block.update(changes))


def _drop(key: str) -> Callable[[Path], None]:
    return _speculator(lambda block: block.pop(key))


def _hc_mult_bshc(block: dict) -> None:
    block.update(hc_mult=2, target_hidden_layout="BSHC")
    block.pop("mtp_state_output", None)


def _sidecar_at_the_root(package: Path) -> None:
    # decoder.onnx (onnx-genai's unwindowed main graph) would be taken before any other root .onnx, so the
    # second root graph matters where there is none: gone, onnx-genai sees model.onnx and the sidecar.
    (package / "decoder.onnx").unlink(missing_ok=True)
    for name in ("mtp_sidecar.onnx", "mtp_sidecar.onnx.data"):  # the graph names its data beside itself
        (package / "mtp_sidecar" / name).rename(package / name)
    (package / "mtp_sidecar").rmdir()
    _set(model="mtp_sidecar.onnx")(package)


def _no_speculator_config(package: Path) -> None:
    (package / CONFIG).write_text("{}\n", encoding="utf-8")


S = "/speculator_config"

MUTANTS = [
    # --- MUTANTS.md, config.json -> speculator_config
    Mutant("01", "target_hidden_output names an output the main graph does not have", _set(target_hidden_output="no_such_hidden"),
           CONFIG, f"{S}/target_hidden_output", "'no_such_hidden' is not an output of decoder.onnx",
           "native MTP target model must expose hidden-state output 'no_such_hidden'"),
    Mutant("02", "hc_mult: 2 with target_hidden_layout: BSH", _set(hc_mult=2),
           CONFIG, f"{S}/hc_mult", "MTP BSH target_hidden_layout requires hc_mult == 1",
           "MTP BSH target_hidden_layout requires hc_mult == 1"),
    Mutant("03", "hc_mult: 2, target_hidden_layout: BSHC, no mtp_state_output", _speculator(_hc_mult_bshc),
           CONFIG, f"{S}/hc_mult", "MTP hc_mult > 1 requires mtp_state_output", "MTP hc_mult > 1 requires mtp_state_output"),
    Mutant("04", "embedding removed", _drop("embedding"),
           CONFIG, f"{S}/embedding", "mtp metadata is missing `embedding`", "mtp metadata is missing `embedding`"),
    Mutant("05", "lm_head.name: ''", _speculator(lambda b: b["lm_head"].update(name="")),
           CONFIG, f"{S}/lm_head/name", "mtp metadata `lm_head.name` must not be empty",
           "mtp metadata `lm_head.name` must not be empty"),
    Mutant("06", "lm_head.name names an initializer the main graph does not have",
           _speculator(lambda b: b["lm_head"].update(name="no_such_lm_head")),
           CONFIG, f"{S}/lm_head/name", "'no_such_lm_head' is not an initializer of decoder.onnx",
           "target model initializer 'no_such_lm_head' was not found"),
    Mutant("07", "embedding.source: file (silently dropped)", _speculator(lambda b: b["embedding"].update(source="file")),
           CONFIG, f"{S}/embedding/source", "`embedding.source` must be `target_initializer`", DROPPED),
    Mutant("08", "target_hidden_layout: bsh, lower case (silently dropped)", _set(target_hidden_layout="bsh"),
           CONFIG, f"{S}/target_hidden_layout", "must be one of BSH, BSHC (case-sensitive)", DROPPED),
    Mutant("09", "target_hidden_layout omitted: the default BSHC does not fit the rank-3 seed", _drop("target_hidden_layout"),
           CONFIG, f"{S}/target_hidden_layout", "BSHC needs a rank-4 seed", "does not match configured Bshc"),
    Mutant("10", "target_hidden_size differs from the graph's hidden width", _set(target_hidden_size=65),
           CONFIG, f"{S}/target_hidden_size", "is 65 but 'hidden_states' in decoder.onnx is 64 wide",
           "does not match configured target hidden size 65"),
    Mutant("11", "num_speculative_tokens: 0", _set(num_speculative_tokens=0),
           CONFIG, f"{S}/num_speculative_tokens", "`num_speculative_tokens` must be greater than zero",
           "mtp metadata `num_speculative_tokens` must be greater than zero"),
    Mutant("12", "kv_mode: accepted_prefix", _set(kv_mode="accepted_prefix"),
           CONFIG, f"{S}/kv_mode", "MTP kv_mode accepted_prefix is declared but not executable",
           "MTP kv_mode accepted_prefix is declared but not executable"),
    Mutant("13", "mtp_hidden_output is not an output of the sidecar", _set(mtp_hidden_output="no_such_mtp_hidden"),
           CONFIG, f"{S}/mtp_hidden_output", f"'no_such_mtp_hidden' is not an output of {SIDECAR}",
           "model is not an MTP head"),
    Mutant("14", "model points at a file that does not exist", _set(model="mtp_sidecar/missing.onnx"),
           CONFIG, f"{S}/model", "'mtp_sidecar/missing.onnx' does not exist in the package", "Failed to load MTP head"),
    # --- MUTANTS.md, inference_metadata.yaml
    Mutant("15", "model.vocab_size removed", _metadata(lambda t: re.sub(r"(?m)^  vocab_size: \d+\n", "", t)),
           METADATA, "/model/vocab_size", "native MTP speculation requires the target vocabulary size",
           "native MTP speculation requires the target vocabulary size"),
    Mutant("16", "a workflow step invokes a component that does not exist",
           _metadata(lambda t: t.replace("component: decoder\n", "component: no_such_component\n", 1)),
           METADATA, "/pipeline/workflow/steps/0/component", "'no_such_component' is not a component",
           "workflow invoke references unknown component 'no_such_component'", base="workflow"),
    Mutant("16b", "flat analogue of 16: model.io.token_input names an input the graph does not have",
           _metadata(lambda t: t.replace("token_input: input_ids", "token_input: no_such_input")),
           METADATA, "/model/io/token_input", "'no_such_input' is not an input of decoder.onnx", None,
           why="ong-check does not hold model.io to the graph; onnx-genai's engine does and refuses the load "
               "(native_decode/load.rs:475-585, decode/resolved_io.rs:432-485 at ac9c7dd)"),
    Mutant("17", "a flat-layout `speculative: {proposal_type: mtp, model: ...}` block added",
           _metadata(lambda t: t + f"speculative:\n  proposal_type: mtp\n  model: {SIDECAR}\n  num_speculative_tokens: 1\n"),
           METADATA, "/speculative", "SpeculativeContract", "speculative: unknown field `proposal_type`"),
    # --- off the Engine::from_dir route, or the declaration dropped without a word
    Mutant("18", "model.io.kv_update: append (the flat layout before ac9c7dd)",
           _metadata(lambda t: t.replace("    kv_ownership: owned\n", "    kv_ownership: owned\n    kv_update: append\n")),
           METADATA, "/model/io/kv_update", "model.io has no kv_update", "unknown field `kv_update`"),
    Mutant("19", "top-level kv_cache: {native_dtype: float32} (the flat layout before ac9c7dd)",
           _metadata(lambda t: t + "kv_cache: {native_dtype: float32}\n"),
           METADATA, "/kv_cache", "has no top-level kv_cache", "unknown field `kv_cache`"),
    Mutant("20", "required_capabilities lists workflow_ssa",
           _metadata(lambda t: t.replace("required_capabilities: [kv_cache,", "required_capabilities: [workflow_ssa, kv_cache,")),
           METADATA, "/required_capabilities/0", "'workflow_ssa' is not a capability", "workflow_ssa"),
    Mutant("21", "the sidecar back at the package root, beside model.onnx (and no decoder.onnx)", _sidecar_at_the_root,
           CONFIG, f"{S}/model", "'mtp_sidecar.onnx' sits at the package root beside model.onnx", "multiple .onnx files"),
    Mutant("22", "hc_mult: '1', a string (silently dropped)", _set(hc_mult="1"),
           CONFIG, f"{S}/hc_mult", "`hc_mult` must be an integer", DROPPED),
    Mutant("23", "kv_mode: PROPOSAL_LOCAL, upper case (silently dropped)", _set(kv_mode="PROPOSAL_LOCAL"),
           CONFIG, f"{S}/kv_mode", "`kv_mode` must be one of proposal_local, accepted_prefix", DROPPED),
    Mutant("24", "model steps out of the package with '..'", _set(model=f"../x/{SIDECAR}"),
           CONFIG, f"{S}/model", "must not contain '..'", "Failed to load MTP head"),
    Mutant("25", "config.json without speculator_config beside the sidecar", _no_speculator_config,
           CONFIG, "", "has no speculator_config", None,
           why="onnx-genai loads the folder without speculation and says nothing, so ong-check passes it (status "
               "absent); mtpc refuses a package whose MTP head no runtime would use"),
]


def prepare(compiled: Path, destination: Path, workflow_metadata: Path | None = None) -> Path:
    """A copy of the compiled package (or, given the workflow metadata mtpc wrote before, that package, its
    manifest rewritten as if mtpc had written it so)."""
    shutil.copytree(compiled, destination)
    if workflow_metadata is not None:
        _sidecar_at_the_root(destination)
        shutil.copyfile(workflow_metadata, destination / METADATA)
        remanifest(destination)
    return destination
