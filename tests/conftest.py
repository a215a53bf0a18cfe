"""Test-run wiring shared by every test folder.

Every package a test writes with an onnx-genai target is loaded by onnx-genai's own checker as it
is written (tests/clients/onnx_genai.py): the wrapper goes in before any test module imports
`write_package`.
"""

import os
from collections import Counter

import pytest

# No test reaches a model hub: a spec lowered in this process that names a hub repo (`hf: owner/name`, a fuzzed
# spec's value) meets huggingface_hub's offline mode and a closed loopback port, before anything imports it. The
# hub tests run mtpc in processes of their own, pointed at the fixture hub (tests/fixtures/hub_server.py).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"

from tests.clients import onnx_genai  # noqa: E402

onnx_genai.check_written_packages()


# The suite runs on pytest-xdist's workers (pyproject's addopts): each worker checks the packages it writes, and
# the controller, which writes none, prints the sum.
def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["ong_check"] = onnx_genai.results()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    worker = getattr(node, "workeroutput", {}).get("ong_check")
    if worker is not None:
        onnx_genai.add_results(worker)


def pytest_terminal_summary(terminalreporter):
    checked, unchecked = onnx_genai.summary()
    if checked is not None:
        terminalreporter.write_line(checked)
    if unchecked is not None:
        terminalreporter.write_line(f"NOT CHECKED: {unchecked}", yellow=True)


# The order the workers get the files in: the longest files first (`--durations`, 2026-12-07), then the rest by
# their number of tests, most first, as xdist orders them itself (pyproject's `--no-loadscope-reorder` hands the
# ordering to this hook). A worker runs a whole file (--dist=loadfile), so a file of one or two minutes that
# starts last (xdist put the one-test 0.17.1 rerun at the very end) keeps the run going while the other worker
# waits; longest first leaves the short files to fill the end.
LONGEST_FIRST = (
    "tests/test_runtime_releases.py",
    "tests/test_pre_commit_hook.py",
    "tests/bench/test_mtp_speedup.py",
    "tests/output/test_interrupted_runs.py",
    "tests/cli/test_diff_goldens.py",
    "tests/cli/test_broken_pipe.py",
    "tests/cli/test_quiet.py",
    "tests/test_packaging.py",
)


def pytest_collection_modifyitems(items):
    def file_of(item):
        return item.nodeid.partition("::")[0]

    tests_in = Counter(file_of(item) for item in items)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    # Stable: a file's tests keep their order, and stay together.
    items.sort(key=lambda item: (rank.get(file_of(item), len(rank)), -tests_in[file_of(item)], file_of(item)))
