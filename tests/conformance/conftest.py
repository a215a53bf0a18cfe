"""Session fixtures of the conformance suite, each built once per family on first use (`Lazy`).

`family` is a test parameter (tests/conformance/families.py names them); everything here is keyed by it:
the release folder, transformers' greedy tokens on it, the packages compiled from it and from llama.cpp's
GGUFs of it, and transformers' greedy tokens on the weights each GGUF holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.clients import hf_transformers, llama_cpp
from tests.fixtures.lazy import Lazy
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec

from .families import family as family_of
from .q8_0 import file_weights

OUTTYPES = ("f32", "q8_0")
# Compared with transformers' float forward on the file's values: `keep: source` carries the Q8_0 blocks into
# MatMulNBits as stored, at accuracy_level 0 (level 4's int8 activations are not exact); expert stacks are
# dequantized into the float MoE op, as QMoE's 8-bit kernel quantizes activations at every accuracy level.
KEEP_SOURCE = "quantization:\n  default: {keep: source, accuracy_level: 0}\n"
FLOAT_EXPERTS = "  overrides:\n    - {match: '*.mlp.experts.*', bits: null}\n"


@pytest.fixture(scope="session")
def conformance_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("conformance")


def compile_family(workdir: Path, name: str, source: str, extra: str = "") -> Path:
    spec = write_spec(workdir / f"{name}.yaml", name, source, extra)
    return compile_spec(spec, workdir / f"pkg-{name}")


@pytest.fixture(scope="session")
def releases(conformance_dir) -> Lazy:
    """family -> its release folder (tokenizer included)."""
    return Lazy(lambda f: family_of(f).write(conformance_dir / f"hf-{f}"))


@pytest.fixture(scope="session")
def transformers_greedy(conformance_dir) -> Lazy:
    """family -> prompt -> transformers' greedy tokens on the release's weights."""

    def build(f: str):
        fam = family_of(f)
        model = fam.transformers(conformance_dir / f"tf-{f}", fam.tensors())
        return {p: hf_transformers.greedy(model, list(p), STEPS) for p in fam.prompts}

    return Lazy(build)


@pytest.fixture(scope="session")
def hf_packages(conformance_dir, releases) -> Lazy:
    return Lazy(lambda f: compile_family(conformance_dir, f"hf-{f}", f"{{hf: {releases[f].name}}}"))


def models_of(packages: Lazy) -> Lazy:
    return Lazy(lambda key: (decoding.load(packages[key]), decoding.load(packages[key] / "mtp")))


@pytest.fixture(scope="session")
def hf_models(hf_packages) -> Lazy:
    """family -> (og.Model of the main package, og.Model of its mtp/ folder)."""
    return models_of(hf_packages)


@pytest.fixture(scope="session")
def ggufs(conformance_dir, releases) -> Lazy:
    """family -> {outtype: llama.cpp's converter's GGUF of the release}; in the same converter process, the
    release published as two files too (`two_files`)."""

    def build(f: str):
        try:
            llama_cpp.converter_tree()
        except llama_cpp.ConverterUnavailable as error:  # fail, never skip: without it nothing here is tested
            pytest.fail(f"llama.cpp's converter is needed and could not be had: {error}", pytrace=False)
        outputs = {t: conformance_dir / f"{f}-{t}.gguf" for t in OUTTYPES}
        two_files = conformance_dir / f"two-{f}" if family_of(f).supports("llama.cpp two files") else None
        return llama_cpp.convert(releases[f], outputs, pre_tokenizer=family_of(f).pre_tokenizer, two_files=two_files,
                                 head_outtypes=HEAD_OUTTYPES)

    return Lazy(build)


# The head files published beside the f32 target: llama.cpp pairs the one nearest the target's quantization (F32).
HEAD_OUTTYPES = ("f32", "q8_0")


@pytest.fixture(scope="session")
def two_files(conformance_dir, ggufs) -> Lazy:
    """family -> the release as llama.cpp's converter publishes it in two files (`--no-mtp`, `--mtp`), in one folder."""
    return Lazy(lambda f: ggufs[f] and llama_cpp.published(conformance_dir / f"two-{f}", HEAD_OUTTYPES))


@pytest.fixture(scope="session")
def gguf_packages(conformance_dir, ggufs) -> Lazy:
    """(family, outtype) -> the package compiled from that GGUF."""

    def build(key):
        f, outtype = key
        path = ggufs[f][outtype]
        keep = KEEP_SOURCE + (FLOAT_EXPERTS if family_of(f).arch.moe else "")
        return compile_family(conformance_dir, f"gguf-{f}-{outtype}", f"{{gguf: {path.name}}}",
                              keep if outtype == "q8_0" else "")

    return Lazy(build)


@pytest.fixture(scope="session")
def gguf_models(gguf_packages) -> Lazy:
    return models_of(gguf_packages)


@pytest.fixture(scope="session")
def file_greedy(conformance_dir, ggufs, transformers_greedy) -> Lazy:
    """(family, outtype) -> prompt -> transformers' greedy tokens on the weights that GGUF holds."""

    def build(key):
        f, outtype = key
        if outtype == "f32":  # the converter's f32 transforms are exact: the release's own weights
            return transformers_greedy[f]
        fam = family_of(f)
        tensors = file_weights(fam.tensors(), ggufs[f][outtype], fam.arch, fam.column_orders(), fam.converter_splits)
        model = fam.transformers(conformance_dir / f"tf-{f}-{outtype}", tensors)
        return {p: hf_transformers.greedy(model, list(p), STEPS) for p in fam.prompts}

    return Lazy(build)


def assert_same(actual: np.ndarray, expected: np.ndarray, name: str) -> None:
    """Equal but for the converter's float32 `-exp(A_log)` (torch's exp), a unit in the last place from numpy's."""
    np.testing.assert_allclose(np.asarray(actual, np.float32), np.asarray(expected, np.float32), rtol=0, atol=1e-6,
                               err_msg=name)
