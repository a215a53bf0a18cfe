"""Test-run wiring shared by every test folder.

Every package a test writes with an onnx-genai target is loaded by onnx-genai's own checker as it
is written (tests/clients/onnx_genai.py): the wrapper goes in before any test module imports
`write_package`.
"""

from tests.clients import onnx_genai

onnx_genai.check_written_packages()


def pytest_terminal_summary(terminalreporter):
    checked, unchecked = onnx_genai.summary()
    if checked is not None:
        terminalreporter.write_line(checked)
    if unchecked is not None:
        terminalreporter.write_line(f"NOT CHECKED: {unchecked}", yellow=True)
