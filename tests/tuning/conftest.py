"""Packages `mtpc tune` runs in the tests, compiled once per session (tests/fixtures/tune_packages.py).

All share one 16-layer tiny trunk (the trunk dear next to the one-layer head, as in real
models) and the prompts of PROMPTS_FILE:

- `sure`: the head fitted to every step of those prompts' greedy continuations, so its
  drafts are right all along them: MTP pays whatever this machine's timings;
- `mixed`: fitted to five steps of seven (`fitted_head.is_memorised`), so every draft count
  meets accepted and rejected drafts, and partly accepted rounds;
- `random`: a seeded random head, right about never;
- `nohead`: the random checkpoint compiled with `mtp.head: off`;

and `fitted_package`, the runtime tests' 4-layer fitted checkpoint, for decode's and the profiler's tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.tune_packages import compile_package, every_step, tune_arch

PROMPTS = ("alpha beta gamma delta", "for i in range(10):", "Dear friend, I write to you")
NEW_TOKENS = 24  # within the fit's horizon (fitted_head.HORIZON)


@pytest.fixture(scope="session")
def tune_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tune")


@pytest.fixture(scope="session")
def prompts_file(tune_workdir) -> Path:
    path = tune_workdir / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def arch():
    return tune_arch(16)


@pytest.fixture(scope="session")
def sure(tune_workdir, arch) -> Path:
    return compile_package(tune_workdir, "sure", arch, fitted_to=PROMPTS, memorised=every_step)


@pytest.fixture(scope="session")
def mixed(tune_workdir, arch) -> Path:
    return compile_package(tune_workdir, "mixed", arch, fitted_to=PROMPTS)


@pytest.fixture(scope="session")
def random_head(tune_workdir, arch) -> Path:
    return compile_package(tune_workdir, "random", arch, fitted_to=None)


@pytest.fixture(scope="session")
def nohead(tune_workdir, arch) -> Path:
    return compile_package(tune_workdir, "nohead", arch, fitted_to=None, spec_extra="mtp: {head: off}\n")


@pytest.fixture(scope="session")
def fitted_package(tmp_path_factory) -> Path:
    """The runtime tests' fitted dense checkpoint (tests/fixtures/fitted_head.py), compiled once: its drafts are
    both accepted and refused, so decode's rounds and the profiler's replays both occur."""
    from tests.fixtures.arch import tiny_arch
    from tests.fixtures.fitted_head import write_fitted_hf_checkpoint
    from tests.runtime.conftest import compile_spec, write_spec

    work = tmp_path_factory.mktemp("fitted")
    checkpoint = write_fitted_hf_checkpoint(work / "fitted", tiny_arch())
    return compile_spec(write_spec(work / "fitted.yaml", "fitted", f"{{hf: {checkpoint.name}}}"), work / "pkg")
