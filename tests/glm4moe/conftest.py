"""Packages of the tiny GLM-4.5 with its fitted MTP layer (tests.fixtures.glm4moe_checkpoints), each built once.

The oracles are independent of mtpc: transformers' own `Glm4MoeForCausalLM` (greedy tokens, logits),
llama.cpp's converter and runtime, and the numpy rendition of speculative decoding with the fitted
head (`fitted_head.simulate_speculative`) for the draft counters.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.reference.forward import DecoderReference, MtpHeadReference
from tests.clients import hf_transformers
from tests.fixtures.glm4moe_checkpoints import (
    PROMPTS,
    fitted_glm_store,
    fitted_glm_tensors,
    load_transformers_glm,
    tiny_glm_arch,
    write_glm_checkpoint,
)
from tests.fixtures.lazy import Lazy
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec

QK_NORM = {"qk_norm": True, "no_qk_norm": False}


def arch_of(variant: str):
    return tiny_glm_arch(qk_norm=QK_NORM[variant])


def compile_glm(workdir: Path, name: str, source: str, extra: str = "") -> Path:
    spec = write_spec(workdir / f"{name}.yaml", name, source, extra)
    return compile_spec(spec, workdir / f"pkg-{name}")


@pytest.fixture(scope="session")
def glm_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("glm4moe")


@pytest.fixture(scope="session")
def glm_arch():
    return tiny_glm_arch()


@pytest.fixture(scope="session")
def transformers_greedy() -> Lazy:
    """variant -> prompt -> transformers' greedy tokens."""

    def build(variant: str):
        arch = arch_of(variant)
        model = load_transformers_glm(arch, fitted_glm_tensors(arch))
        return {p: hf_transformers.greedy(model, list(p), STEPS) for p in PROMPTS}

    return Lazy(build)


@pytest.fixture(scope="session")
def references() -> Lazy:
    """variant -> (numpy trunk, numpy head) on the fitted weights."""

    def build(variant: str):
        arch = arch_of(variant)
        store = fitted_glm_store(arch)
        return DecoderReference(arch, store), MtpHeadReference(arch, store)

    return Lazy(build)


@pytest.fixture(scope="session")
def glm_checkpoints(glm_workdir) -> Lazy:
    """variant -> the release-layout HF folder (experts one per expert, tokenizer files)."""
    return Lazy(lambda v: write_glm_checkpoint(glm_workdir / f"hf-{v}", arch_of(v), tokenizer=True))


@pytest.fixture(scope="session")
def glm_packages(glm_workdir, glm_checkpoints) -> Lazy:
    """variant -> the package compiled from that folder for onnxruntime-genai on CPU."""
    return Lazy(lambda v: compile_glm(glm_workdir, f"glm-hf-{v}", f"{{hf: {glm_checkpoints[v].name}}}"))


@pytest.fixture(scope="session")
def glm_models(glm_packages) -> Lazy:
    """variant -> (og.Model of the main package, og.Model of its mtp/ folder)."""
    return Lazy(lambda v: (decoding.load(glm_packages[v]), decoding.load(glm_packages[v] / "mtp")))
