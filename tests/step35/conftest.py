"""The tiny Step-3.5 release (tests.fixtures.step35_checkpoints) and what is built from it, each once per session:
its package, llama.cpp's converter's f32 GGUF of it, and the numpy references."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.reference.forward import DecoderReference
from tests.clients import llama_cpp
from tests.fixtures.step35_checkpoints import fitted_step_store, tiny_step_arch, write_step_checkpoint
from tests.runtime import decoding
from tests.runtime.conftest import compile_spec, write_spec


@pytest.fixture(scope="session")
def step_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("step35")


@pytest.fixture(scope="session")
def arch():
    return tiny_step_arch()


@pytest.fixture(scope="session")
def store(arch):
    return fitted_step_store(arch)


@pytest.fixture(scope="session")
def main_reference(arch, store):
    return DecoderReference(arch, store)


@pytest.fixture(scope="session")
def release(step_dir, arch) -> Path:
    return write_step_checkpoint(step_dir / "release", arch)


def compile_step(step_dir: Path, name: str, extra: str = "") -> Path:
    spec = write_spec(step_dir / f"{name}.yaml", name, "{hf: release}", extra)
    return compile_spec(spec, step_dir / f"pkg-{name}")


@pytest.fixture(scope="session")
def package(step_dir, release) -> Path:
    return compile_step(step_dir, "step")


@pytest.fixture(scope="session")
def models(package):
    return decoding.load(package), decoding.load(package / "mtp")


@pytest.fixture(scope="session")
def gguf(step_dir, release) -> Path:
    try:
        llama_cpp.converter_tree()
    except llama_cpp.ConverterUnavailable as error:  # fail, never skip: without it nothing here is tested
        pytest.fail(f"llama.cpp's converter is needed and could not be had: {error}", pytrace=False)
    return llama_cpp.convert(release, {"f32": step_dir / "step-f32.gguf"}, pre_tokenizer="glm4")["f32"]
