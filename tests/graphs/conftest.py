"""Fixtures every graph test shares."""

import pytest

from tests.fixtures.arch import tiny_arch


@pytest.fixture(scope="module")
def arch():
    return tiny_arch()
