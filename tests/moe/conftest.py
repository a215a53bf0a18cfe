"""Packages of the tiny Qwen3.5-MoE with its fitted head, each compiled once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.emit.tokenizer import synthetic_tokenizer_files
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from tests.clients import hf_transformers, llama_cpp
from tests.fixtures.fitted_head import PROMPTS
from tests.fixtures.moe_checkpoints import (
    fitted_moe_store,
    fitted_moe_tensors,
    load_transformers_model,
    tiny_moe_arch,
    write_moe_release_checkpoint,
)
from tests.runtime.conftest import STEPS, compile_spec, write_spec


@pytest.fixture(scope="session")
def moe_arch():
    return tiny_moe_arch()


@pytest.fixture(scope="session")
def moe_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("moe")


@pytest.fixture(scope="session")
def moe_reference(moe_arch) -> Qwen35Reference:
    return Qwen35Reference(moe_arch, fitted_moe_store(moe_arch))


@pytest.fixture(scope="session")
def moe_head_reference(moe_arch) -> MtpHeadReference:
    return MtpHeadReference(moe_arch, fitted_moe_store(moe_arch))


@pytest.fixture(scope="session")
def moe_transformers_greedy(moe_arch) -> dict[tuple[int, ...], list[int]]:
    model = load_transformers_model(moe_arch, fitted_moe_tensors(moe_arch))
    return {prompt: hf_transformers.greedy(model, list(prompt), STEPS) for prompt in PROMPTS}


@pytest.fixture(scope="session")
def moe_release(moe_workdir, moe_arch) -> Path:
    return write_moe_release_checkpoint(moe_workdir / "release", moe_arch)


@pytest.fixture(scope="session")
def moe_release_with_tokenizer(moe_workdir, moe_arch) -> Path:
    """The release checkpoint with a tiny byte-level tokenizer (llama.cpp's converter and the builder need one)."""
    folder = write_moe_release_checkpoint(moe_workdir / "release-tokenizer", moe_arch)
    for relpath, content in synthetic_tokenizer_files(moe_arch):
        (folder / relpath).write_bytes(content)
    return folder


def compile_moe(workdir: Path, name: str, source: str, extra: str = "") -> Path:
    spec = write_spec(workdir / f"{name}.yaml", name, source, extra)
    return compile_spec(spec, workdir / f"pkg-{name}")


@pytest.fixture(scope="session")
def moe_package(moe_workdir, moe_release) -> Path:
    return compile_moe(moe_workdir, "moe-hf", f"{{hf: {moe_release.name}}}")




@pytest.fixture(scope="session")
def moe_ggufs(moe_workdir, moe_release_with_tokenizer) -> dict[str, Path]:
    try:
        llama_cpp.converter_tree()
    except llama_cpp.ConverterUnavailable as error:  # fail, never skip: without it nothing here is tested
        pytest.fail(f"llama.cpp's converter is needed and could not be had: {error}", pytrace=False)
    outputs = {t: moe_workdir / f"moe-{t}.gguf" for t in ("f32", "q8_0")}
    return llama_cpp.convert(moe_release_with_tokenizer, outputs)


@pytest.fixture(scope="session")
def moe_gguf(moe_ggufs) -> Path:
    return moe_ggufs["f32"]
