"""The conformance inputs from ../shared/ fail the tests, not skip them, when absent."""

import pytest

from tests.fixtures.shared import SHARED, shared_file


def test_a_missing_shared_file_fails_the_test():
    with pytest.raises(pytest.fail.Exception, match="tests need ../shared/"):
        shared_file("conformance/no-such-schema.json")


def test_the_shared_folder_is_beside_the_checkout():
    assert (SHARED / "conformance" / "onnx-genai").is_dir()
