"""The hypothesis budget of the header fuzz tests, and a walker that finds a GGUF header's fields.

CI runs a fixed, derandomized budget (`MAX_EXAMPLES` examples per test, the same examples
every run). For a longer, randomized run set MTPC_FUZZ_EXAMPLES, e.g.

    MTPC_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest -q -p no:cacheprovider tests/sources/test_header_fuzz.py

A failing example is printed by hypothesis as the mutation that broke the reader; add it to
`tests/cases/checkpoints/` (or an `@example`) so it stays fixed.
"""

from __future__ import annotations

import os
import struct
from datetime import timedelta

from hypothesis import HealthCheck, settings

_LONG = os.environ.get("MTPC_FUZZ_EXAMPLES")
MAX_EXAMPLES = int(_LONG) if _LONG else 200

FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=not _LONG,  # CI: the same examples every run; an opt-in long run explores
    deadline=timedelta(seconds=5),  # a hang (or a header that makes the reader loop) fails the example
    database=None,  # nothing written into the tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_fields(raw: bytes) -> tuple[list[int], list[int], int]:
    """Offsets of the header's u64 counts / lengths and u32 type codes, and where the header ends.

    Written from the GGUF format description for the tests (not mtpc's reader), for valid files only.
    """
    counts: list[int] = []
    types: list[int] = []
    pos = 8  # magic, version

    def u32() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        return v

    def u64() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<Q", raw, pos)
        pos += 8
        return v

    def string() -> None:
        nonlocal pos
        counts.append(pos)
        length = u64()  # not `pos += u64()`: that adds to the position before the read
        pos += length

    def value(kind: int) -> None:
        nonlocal pos
        if kind == 8:
            string()
        elif kind == 9:
            types.append(pos)
            element = u32()
            counts.append(pos)
            n = u64()
            for _ in range(n):
                value(element)
        else:
            pos += _SCALAR_SIZES[kind]

    counts.append(pos)
    n_tensors = u64()
    counts.append(pos)
    n_kv = u64()
    for _ in range(n_kv):
        string()
        types.append(pos)
        value(u32())
    for _ in range(n_tensors):
        string()
        counts.append(pos)
        n_dims = u32()  # a u32, but as a size field it belongs with the counts
        for _ in range(n_dims):
            counts.append(pos)
            u64()
        types.append(pos)
        u32()
        counts.append(pos)  # the data offset
        u64()
    return counts, types, pos
