"""A file named on the command line that cannot be read is a usage error naming it, never a traceback."""

from __future__ import annotations

import os

import pytest

from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.util.user_files import read_user_file


def refusal(path, **kwargs) -> str:
    with pytest.raises(MtpcError) as caught:
        read_user_file(path, "prompts file", **kwargs)
    assert caught.value.exit_code == ExitCode.USAGE
    (diagnostic,) = caught.value.diagnostics
    return diagnostic.message


def test_a_readable_file_is_its_bytes(tmp_path):
    (tmp_path / "p.txt").write_bytes(b"a\nb\n")
    assert read_user_file(tmp_path / "p.txt", "prompts file") == b"a\nb\n"


def test_each_way_a_file_cannot_be_read_names_it(tmp_path):
    assert refusal(tmp_path / "absent.txt") == f"prompts file {str(tmp_path / 'absent.txt')!r} does not exist"
    assert refusal(tmp_path) == f"prompts file {str(tmp_path)!r} is a directory"
    if os.geteuid() != 0:  # root reads any file whatever its mode
        locked = tmp_path / "locked.txt"
        locked.write_bytes(b"x")
        locked.chmod(0)
        assert refusal(locked).startswith(f"cannot read prompts file {str(locked)!r}: Permission denied")


def test_a_file_over_the_limit_is_refused_without_reading_it_all(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * ((1 << 20) + 1))
    assert refusal(big, max_bytes=1 << 20, too_large=": not a tune report") == \
        f"prompts file {str(big)!r} is larger than 1 MiB: not a tune report"
    assert read_user_file(big, "prompts file", max_bytes=2 << 20) == b"x" * ((1 << 20) + 1)
