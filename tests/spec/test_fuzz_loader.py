"""Property: whatever is done to a valid spec, loading and lowering it ends in exit 1 or 2 with a
message naming the file, never an internal error (a traceback, exit 3), a hang or a runaway
allocation.

The mutations start from every valid spec (specs/ and tests/cases/valid/): byte flips,
truncations, insertions of YAML syntax (anchors, aliases, tags, brackets, odd scalars), deep
nesting (flow and block), alias bombs, and lines doubled or dropped.

Budget: CI runs a fixed, derandomized 200 examples (the same ones every run; a few seconds).
A longer run explores new ones each time (random seed), e.g.

    MTPC_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/spec/test_fuzz_loader.py --hypothesis-show-statistics

Each example must finish within `EXAMPLE_SECONDS` (an alarm stops a hang) and the process's peak
memory may grow by at most `MEMORY_GROWTH_MB` over the whole run.
"""

from __future__ import annotations

import os
import resource
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.spec.loader import load_spec
from mtpc.spec.lower import lower

TESTS = Path(__file__).resolve().parents[1]
SEEDS = sorted((TESTS / "cases" / "valid").glob("*.yaml")) + sorted((TESTS.parent / "specs").glob("*.yaml"))
SEED_BYTES = {path.name: path.read_bytes() for path in SEEDS}

LONG_RUN = os.environ.get("MTPC_FUZZ_EXAMPLES")
settings.register_profile(
    "mtpc-fuzz",
    max_examples=int(LONG_RUN or 200),
    deadline=5000,  # ms per example; the alarm below catches a real hang
    derandomize=LONG_RUN is None,  # CI: the same examples every run
    database=None,  # no .hypothesis/ folder in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXAMPLE_SECONDS = 10
MEMORY_GROWTH_MB = 256

SNIPPETS = [
    "&a ", "*a", "*nowhere", "&a [*a]", "<<: *a\n", "[", "]", "{", "}", ": ", "- ", "? ", ",", "\n", "\t",
    "  ", "|\n", ">-\n", "'", '"', "#", "---\n", "...\n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n",
    "!!binary ", "!!python/object/apply:os.system ", "!!set ", "!!omap ", "!!timestamp ", "!custom ",
    ".nan", "-.inf", "1e999", "0x1F", "0o17", "1_000", "9" * 5000, "~", "null", "yes", "on", "2001-12-14",
    "\ufeff", "\x00", "\u2028", "é", "\U0001f600", "a: 1\na: 2\n", "[1, 2, 3]", "{x: y}",
]
NESTS = [("[", "]"), ("{a: ", "}"), ("- ", ""), ("[{b: ", "}]")]


def _at(data: bytes, position: int) -> int:
    return position % (len(data) + 1)


def _nest(opening: str, closing: str, depth: int) -> bytes:
    return (opening * depth + "x" + closing * depth).encode()


def _bomb(levels: int, width: int) -> bytes:
    lines = [f"z0: &z0 [{', '.join(['lol'] * width)}]"]
    lines += [f"z{i}: &z{i} [{', '.join([f'*z{i - 1}'] * width)}]" for i in range(1, levels)]
    return ("\n" + "\n".join(lines) + "\n").encode()


def mutate(data: bytes, op: tuple) -> bytes:
    kind = op[0]
    if kind == "flip":
        at = _at(data, op[1]) % max(len(data), 1)
        return data[:at] + bytes([op[2]]) + data[at + 1 :] if data else data
    if kind == "truncate":
        return data[: _at(data, op[1])]
    if kind == "insert":
        at = _at(data, op[1])
        return data[:at] + op[2].encode() + data[at:]
    if kind == "nest":
        at = _at(data, op[1])
        return data[:at] + _nest(*op[3], op[2]) + data[at:]
    if kind == "bomb":
        return data + _bomb(op[1], op[2])
    lines = data.split(b"\n")
    at = op[1] % len(lines)
    if kind == "dup_line":
        return b"\n".join(lines[: at + 1] + lines[at:])
    return b"\n".join(lines[:at] + lines[at + 1 :])  # del_line


positions = st.integers(0, 10_000)
operations = st.one_of(
    st.tuples(st.just("flip"), positions, st.integers(0, 255)),
    st.tuples(st.just("truncate"), positions),
    st.tuples(st.just("insert"), positions, st.sampled_from(SNIPPETS)),
    st.tuples(st.just("nest"), positions, st.integers(1, 3000), st.sampled_from(NESTS)),
    st.tuples(st.just("bomb"), st.integers(2, 9), st.integers(2, 12)),
    st.tuples(st.sampled_from(["dup_line", "del_line"]), positions),
)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang(f"an example ran longer than {EXAMPLE_SECONDS} s")


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory(prefix="mtpc-fuzz-") as name:
        yield Path(name)


@pytest.fixture(scope="module")
def memory_at_start():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


@settings(settings.get_profile("mtpc-fuzz"))
@given(seed=st.sampled_from(sorted(SEED_BYTES)), ops=st.lists(operations, min_size=1, max_size=4))
def test_a_mutated_spec_is_refused_with_a_message_naming_the_file(folder, memory_at_start, seed, ops):
    data = SEED_BYTES[seed]
    for op in ops:
        data = mutate(data, op)
    path = folder / seed
    path.write_bytes(data)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_SECONDS)
    try:
        lower(load_spec(path))
        event("still a valid spec")
    except MtpcError as err:
        event(f"exit {int(err.exit_code)}")
        assert err.exit_code in (ExitCode.FINDINGS, ExitCode.USAGE), str(err)
        assert err.diagnostics and all(str(path) in d.render() for d in err.diagnostics), str(err)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory_at_start) / 1024
    assert grown_mb < MEMORY_GROWTH_MB, f"peak memory grew by {grown_mb:.0f} MB"


def test_the_mutations_reach_what_they_aim_at(tmp_path):
    """The hostile mutations on their own give the loader's positioned refusals (exit 2)."""
    base = SEED_BYTES["minimal.yaml"]
    for data, message in [
        (mutate(base, ("bomb", 9, 12)), "expands to more than 10000 values"),
        (b"mtpc: 1\nsource:\n" + _nest("- ", "", 3000), "nested more than 32 deep"),
        (b"source: " + _nest("[", "]", 3000), "nested more than 32 deep"),
    ]:
        path = tmp_path / "spec.yaml"
        path.write_bytes(data)
        with pytest.raises(MtpcError) as caught:
            load_spec(path)
        assert caught.value.exit_code == ExitCode.USAGE
        assert message in str(caught.value) and f"{path}:" in str(caught.value)
