"""Compiled packages shared by the runtime tests: each is compiled once per session.

The model is the tiny Qwen3.5 with the fitted MTP head (`tests.fixtures.fitted_head`),
written as a float32 Hugging Face checkpoint and as a float32 GGUF; both go through
the whole pipeline (spec file -> `mtpc.pipeline.driver.build` -> `mtpc.output.write.write_package`)
for the installed onnxruntime-genai release (0.18.0, or 0.17.1 when tests/test_runtime_releases.py
runs these tests against it) on CPU with dense attention.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.pipeline.driver import build
from mtpc.output.write import write_package
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from tests.fixtures.arch import tiny_arch
from tests.fixtures.fitted_head import PROMPTS, fitted_store, write_fitted_gguf, write_fitted_hf_checkpoint
from tests.fixtures.ort_release import INSTALLED
from tests.fixtures.package_files import files_of  # the runtime tests import it from here

STEPS = 20
# The runtime tests decode with 1..4 drafts, so their packages hold four (the default is 2: a windowed
# package's runtime drafts at most W - 1 = max_draft_tokens tokens).
# Tests edit the spec by replacing "attention: dense}", so it stays last.
ORT_GENAI_CPU = (f'targets:\n  onnxruntime_genai: {{version: "{INSTALLED}", execution_provider: cpu, max_draft_tokens: 4, '
                 'attention: dense}\n')


def write_spec(path: Path, name: str, source: str, extra: str = "") -> Path:
    """A spec for the CPU target; `source` is the YAML of the `source` value, relative to `path`'s folder."""
    path.write_text(f"mtpc: 1\nname: {name}\nsource: {source}\n{extra}{ORT_GENAI_CPU}", encoding="utf-8")
    return path


def compile_spec(spec: Path, out: Path) -> Path:
    write_package(build(spec).artifacts, out)
    return out


@pytest.fixture(scope="session")
def arch():
    return tiny_arch()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runtime")


@pytest.fixture(scope="session")
def reference(arch) -> Qwen35Reference:
    return Qwen35Reference(arch, fitted_store(arch))


@pytest.fixture(scope="session")
def head_reference(arch) -> MtpHeadReference:
    return MtpHeadReference(arch, fitted_store(arch))


@pytest.fixture(scope="session")
def reference_greedy(reference) -> dict[tuple[int, ...], list[int]]:
    return {prompt: reference.greedy(list(prompt), STEPS) for prompt in PROMPTS}


@pytest.fixture(scope="session")
def fitted_hf(workdir, arch) -> Path:
    return write_fitted_hf_checkpoint(workdir / "fitted-hf", arch)


@pytest.fixture(scope="session")
def fitted_gguf(workdir, arch) -> Path:
    return write_fitted_gguf(workdir / "fitted.gguf", arch)


@pytest.fixture(scope="session")
def hf_package(workdir, fitted_hf) -> Path:
    spec = write_spec(workdir / "hf.yaml", "fitted", f"{{hf: {fitted_hf.name}}}")
    return compile_spec(spec, workdir / "pkg-hf")


@pytest.fixture(scope="session")
def gguf_package(workdir, fitted_gguf) -> Path:
    spec = write_spec(workdir / "gguf.yaml", "fitted", f"{{gguf: {fitted_gguf.name}}}")
    return compile_spec(spec, workdir / "pkg-gguf")
