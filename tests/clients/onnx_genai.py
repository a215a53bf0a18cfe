"""onnx-genai's own metadata parser and MTP validators (`ong-check`), built once per machine.

`../shared/conformance/onnx-genai-engine/` holds onnx-genai's metadata crate at the commit mtpc's
packages are checked against (`mtpc.profiles.onnx_genai.COMMIT`), the engine's MTP validators copied
verbatim from it, and `build.sh OUT`, which builds the `ong-check` binary around them offline (it
needs a rustc >= 1.88 and Debian's librust-*-dev packages, which it apt-get installs when it runs as
root). `ong-check PKGDIR` prints one JSON line: the route onnx-genai would load the folder by, the
resolved MTP proposer, errors and warnings (see that folder's README.md).

The binary is built into the test cache, once per machine:

    ${MTPC_TEST_CACHE:-~/.cache/mtpc-tests}/ong-check-build/ong-check

beside a stamp of the conformance folder it was built from, so a changed folder is rebuilt. A file
lock makes a second run wait for the first one's build and then use it. Without the shared folder
or a working build (no cargo / rustc, missing Debian packages), tests that need ong-check skip with
the reason outside CI and fail with it when `CI` is set.

Every package a test writes (`mtpc.output.write.write_package`, which `mtpc compile`, the API and
the test helpers all go through) that has an `inference_metadata.yaml` is checked as it is written
(`check_written_packages`, installed by tests/conftest.py): ong-check must load it on onnx-genai's
`Engine::from_dir` route with no error and only `EXPECTED_WARNING`, with the MTP proposer resolved to
the package's sidecar when it has one, and no speculative config at all when it has none.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from mtpc.profiles.onnx_genai import PROFILE
from tests.fixtures.shared import SHARED, HOW_TO_GET_IT, in_ci

CONFORMANCE = "conformance/onnx-genai-engine"
# At onnx-genai ac9c7dd every package on the Engine::from_dir route (no `pipeline`) gets this one
# warning: the crate's package validator wants a pipeline (onnx-genai-metadata parser.rs:411-415),
# while Engine::from_dir's admission refuses any pipeline (it derives `workflow_ssa`). ong-check counts
# it only on the pipeline route; a package that would clear it could not carry the MTP proposer.
EXPECTED_WARNING = "load_metadata_package [crate]: Parse error: metadata has no pipeline section"
ENGINE_ROUTE = "engine (Engine::from_dir)"
SIDECAR = f"{PROFILE.sidecar_folder}/mtp_sidecar.onnx"


class OngCheckUnavailable(RuntimeError):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("MTPC_TEST_CACHE") or Path.home() / ".cache" / "mtpc-tests")


def build_dir() -> Path:
    return cache_root() / "ong-check-build"


def _conformance() -> Path:
    folder = SHARED / CONFORMANCE
    if not (folder / "build.sh").is_file():
        raise OngCheckUnavailable(f"{folder}/build.sh is missing: {HOW_TO_GET_IT}")
    return folder


def _stamp(folder: Path) -> str:
    """What the binary is built from: every file of the conformance folder, by path and content."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _built(out: Path, stamp: str) -> bool:
    stamp_file = out / "ong-check.source-sha256"
    return (out / "ong-check").is_file() and stamp_file.is_file() and stamp_file.read_text().strip() == stamp


def binary() -> Path:
    """The cached ong-check, built first when absent or built from another conformance folder (minutes).

    Raises OngCheckUnavailable, every time, when it cannot be had: one build attempt per test run."""
    tool, reason = _availability()
    if tool is None:
        raise OngCheckUnavailable(reason)
    return tool


@functools.lru_cache(maxsize=None)
def _availability() -> tuple[Path | None, str | None]:
    try:
        return _build(), None
    except OngCheckUnavailable as missing:
        return None, str(missing)


def _build() -> Path:
    folder = _conformance()
    build_sh = (folder / "build.sh").read_text(encoding="utf-8")
    if f"COMMIT={PROFILE.commit}" not in build_sh:
        raise AssertionError(f"{folder}/build.sh builds another onnx-genai commit than mtpc.profiles.onnx_genai's "
                             f"{PROFILE.commit}: check the packages against the new commit and update the profile")
    stamp = _stamp(folder)
    out = build_dir()
    if _built(out, stamp):
        return out / "ong-check"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "ong-check-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a second caller waits, then finds the binary
        if not _built(out, stamp):
            (out / "ong-check.source-sha256").unlink(missing_ok=True)
            result = subprocess.run(["bash", str(folder / "build.sh"), str(out)], capture_output=True, text=True)
            if result.returncode != 0:
                raise OngCheckUnavailable(
                    f"building ong-check failed (bash {folder}/build.sh {out}, exit {result.returncode}): "
                    f"{result.stderr.strip()[-3000:]}"
                )
            (out / "ong-check.source-sha256").write_text(stamp + "\n")
    return out / "ong-check"


def require() -> Path:
    """ong-check, or a skip (outside CI) / failure (in CI) saying why it is not available."""
    try:
        return binary()
    except OngCheckUnavailable as missing:
        message = f"onnx-genai's ong-check is not available: {missing}"
        if in_ci():
            pytest.fail(f"{message} (CI is set, so this fails instead of skipping)", pytrace=False)
        pytest.skip(message)


def run(package: Path, tool: Path | None = None) -> tuple[int, dict]:
    """(exit code, report) of `ong-check package`."""
    result = subprocess.run([str(tool or require()), str(package)], capture_output=True, text=True)
    if result.returncode not in (0, 1):
        raise AssertionError(f"ong-check {package} exited {result.returncode}: {result.stdout}{result.stderr}")
    return result.returncode, json.loads(result.stdout)


def loading_problems(package: Path, report: dict, code: int) -> list[str]:
    """How `report` falls short of onnx-genai loading `package` with exactly its MTP head (empty: it does not)."""
    problems = []
    if code != 0 or not report.get("ok") or report.get("errors"):
        problems.append(f"ong-check exit {code}, errors {report.get('errors')}")
    if report.get("warnings") != [EXPECTED_WARNING]:
        problems.append(f"warnings {report.get('warnings')}, expected only {EXPECTED_WARNING!r}")
    if (report.get("layout"), report.get("route")) != ("flat", ENGINE_ROUTE):
        problems.append(f"layout {report.get('layout')!r} on route {report.get('route')!r}, expected flat on {ENGINE_ROUTE!r}")
    speculative = report.get("speculative") or {}
    if (package / SIDECAR).is_file():
        resolved = speculative.get("resolved") or {}
        if speculative.get("status") != "mtp" or resolved.get("model") != str(package / SIDECAR):
            problems.append(f"the MTP proposer is not the package's {SIDECAR}: {speculative}")
    elif speculative != {"status": "absent", "config_json": False, "metadata_speculative_contract": False}:
        problems.append(f"a package without an MTP head has a speculative config: {speculative}")
    return problems


def assert_loads(package: Path) -> dict:
    """ong-check loads `package` with its MTP head (or with no speculative config at all when it has none)."""
    code, report = run(package)
    problems = loading_problems(package, report, code)
    assert not problems, f"onnx-genai would not load {package} as intended:\n- " + "\n- ".join(problems) + f"\n{report}"
    return report


# ----------------------------------------------------------------------------- every package a test writes


# Packages written while ong-check could not be had (outside CI only); the proposer status of each one loaded.
_unchecked: list[Path] = []
_checked: list[str] = []


def check_written(package: Path) -> None:
    """ong-check loads a package a test just wrote, if it has onnx-genai metadata (outside CI, without ong-check:
    it is counted and named at the end of the run instead; in CI that fails)."""
    if not (package / "inference_metadata.yaml").is_file():
        return
    try:
        tool = binary()
    except OngCheckUnavailable as missing:
        if in_ci():
            pytest.fail(f"cannot check {package} with onnx-genai's ong-check: {missing}", pytrace=False)
        _unchecked.append(package)
        return
    code, report = run(package, tool)
    problems = loading_problems(package, report, code)
    assert not problems, f"onnx-genai would not load the package just written to {package}:\n- " + "\n- ".join(problems)
    _checked.append(report["speculative"]["status"])


def check_written_packages() -> None:
    """Wrap `mtpc.output.write.write_package` so each package written with onnx-genai metadata is loaded by ong-check."""
    import mtpc.output.write as write

    original = write.write_package

    @functools.wraps(original)
    def write_package(artifacts, out_dir, **kwargs):
        written = original(artifacts, out_dir, **kwargs)
        check_written(Path(out_dir))
        return written

    write.write_package = write_package


def results() -> dict[str, list[str]]:
    """What this process checked, for a pytest-xdist worker to hand to the run's controller (plain strings)."""
    return {"checked": list(_checked), "unchecked": [str(p) for p in _unchecked]}


def add_results(worker: dict[str, list[str]]) -> None:
    """Count a worker's packages in this (the controller's) summary."""
    _checked.extend(worker["checked"])
    _unchecked.extend(Path(p) for p in worker["unchecked"])


def summary() -> tuple[str | None, str | None]:
    """(what ong-check loaded, what went unchecked and why) for the end of the run; None where there is nothing to say."""
    checked = unchecked = None
    if _checked:
        checked = (f"onnx-genai's ong-check accepted all {len(_checked)} package(s) with onnx-genai metadata the tests wrote "
                   f"({_checked.count('mtp')} with the MTP proposer, {_checked.count('absent')} text-only)")
    if _unchecked:  # never in CI: there it fails
        unchecked = (f"{len(_unchecked)} package(s) with onnx-genai metadata were written but not loaded by onnx-genai's "
                     f"ong-check: {_availability()[1]}")
    return checked, unchecked


if __name__ == "__main__":  # builds it by hand: python -m tests.clients.onnx_genai
    import sys

    try:
        print(binary())
    except OngCheckUnavailable as missing:
        sys.exit(f"onnx-genai's ong-check is not available: {missing}")
