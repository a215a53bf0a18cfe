"""Fixtures every graph test shares."""

import pytest

from mtpc.reference.forward import Qwen35Reference
from mtpc.sources.random_weights import seeded_store

from tests.fixtures.arch import tiny_arch


@pytest.fixture(scope="module")
def arch():
    return tiny_arch()


@pytest.fixture(scope="module")
def store(arch):
    return seeded_store(arch, 0)


@pytest.fixture(scope="module")
def reference(arch, store):
    """The numpy reference forward of `store`'s weights, independent of the graph builder."""
    return Qwen35Reference(arch, store)
