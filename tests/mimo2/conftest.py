"""The tiny MiMo-V2-Flash release (tests.fixtures.mimo2_checkpoints) and what is built from it, each once per session:
its package and the numpy references."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.reference.forward import DecoderReference
from tests.fixtures.mimo2_checkpoints import fitted_mimo_store, tiny_mimo_arch, write_mimo_checkpoint
from tests.runtime import decoding
from tests.runtime.conftest import compile_spec, write_spec


@pytest.fixture(scope="session")
def mimo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mimo2")


@pytest.fixture(scope="session")
def arch():
    return tiny_mimo_arch()


@pytest.fixture(scope="session")
def store(arch):
    return fitted_mimo_store(arch)


@pytest.fixture(scope="session")
def main_reference(arch, store):
    return DecoderReference(arch, store)


@pytest.fixture(scope="session")
def release(mimo_dir, arch) -> Path:
    return write_mimo_checkpoint(mimo_dir / "release", arch)


def compile_mimo(mimo_dir: Path, name: str, source: str = "release", extra: str = "") -> Path:
    spec = write_spec(mimo_dir / f"{name}.yaml", name, f"{{hf: {source}}}", extra)
    return compile_spec(spec, mimo_dir / f"pkg-{name}")


@pytest.fixture(scope="session")
def package(mimo_dir, release) -> Path:
    return compile_mimo(mimo_dir, "mimo")


@pytest.fixture(scope="session")
def models(package):
    return decoding.load(package), decoding.load(package / "mtp")
