"""Progress on stderr: byte counts with rate and ETA for the weight phase, -q and -v on every verb."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from mtpc.cli.main import VERB_MODULES, build_parser, main
from mtpc.util.progress import Console, human_duration, human_size

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"
_SIZE = r"([\d.]+) (B|KiB|MiB|GiB)"
LINE = re.compile(rf"^mtpc: (?:\[ *[\d.]+s\] )?writing: {_SIZE} / {_SIZE} \((\d+) %\)(?:, {_SIZE}/s, ETA \S+)?$")
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def _bytes(number: str, unit: str) -> float:
    return float(number) * UNITS[unit]


def _compile(tmp_path, capsys, *flags) -> str:
    capsys.readouterr()
    assert main(["compile", str(TINY), "-o", str(tmp_path / "pkg"), *flags]) == 0
    return capsys.readouterr().err


def test_ci_log_gets_periodic_byte_count_lines_with_rate_and_eta(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MTPC_PROGRESS_INTERVAL", "0")  # a line per chunk: the tiny model's write is short
    err = _compile(tmp_path, capsys)
    lines = [LINE.match(line) for line in err.splitlines() if line.startswith("mtpc: writing: ") and " / " in line]
    assert len(lines) >= 5 and all(lines), err
    done = [_bytes(m[1], m[2]) for m in lines]
    assert done == sorted(done)
    total = {(m[3], m[4]) for m in lines}
    assert len(total) == 1
    package = sum(p.stat().st_size for p in (tmp_path / "pkg").rglob("*") if p.is_file())
    (number, unit), = total
    assert abs(_bytes(number, unit) - package) <= 0.01 * package  # the total is the package's size
    assert lines[-1][5] == "100" and lines[-1][6] is not None  # rate and ETA shown
    assert re.search(r"^mtpc: writing: [\d.]+ \w+ in \S+, [\d.]+ \w+/s$", err, re.M)


def test_a_short_write_prints_only_its_closing_line_at_the_default_interval(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MTPC_PROGRESS_INTERVAL", raising=False)
    err = _compile(tmp_path, capsys)
    assert not [line for line in err.splitlines() if LINE.match(line)], err
    assert "mtpc: writing: " in err


def test_quiet_silences_progress(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MTPC_PROGRESS_INTERVAL", "0")
    assert _compile(tmp_path, capsys, "-q") == ""


def test_verbose_adds_elapsed_times_and_a_line_per_file(tmp_path, capsys):
    err = _compile(tmp_path, capsys, "-v")
    assert re.search(r"^mtpc: \[ *[\d.]+s\] emitting onnx_graphs$", err, re.M), err
    assert re.search(r"^mtpc: \[ *[\d.]+s\] wrote model\.onnx\.data \([\d.]+ (KiB|MiB), [\d.]+ s\)$", err, re.M), err
    assert "wrote model.onnx.data" not in _compile(tmp_path, capsys)


def test_final_listing_shows_human_readable_sizes(tmp_path, capsys):
    capsys.readouterr()
    assert main(["compile", str(TINY), "-o", str(tmp_path / "pkg"), "-q"]) == 0
    listing = capsys.readouterr().out
    size = (tmp_path / "pkg" / "model.onnx.data").stat().st_size
    assert re.search(rf"^  model\.onnx\.data +{re.escape(human_size(size))}$", listing, re.M), listing
    assert "bytes" not in listing


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_tqdm_bar_with_rate_and_eta():
    stream = _Terminal()
    meter = Console(stream=stream).weights(8 << 20)
    for _ in range(4):
        meter.advance(1 << 20)
    time.sleep(0.3)  # past tqdm's refresh interval, so the bar is redrawn with a measured rate and ETA
    meter.advance(1 << 20)
    text = stream.getvalue()
    meter.close()
    assert re.search(r"mtpc: writing: +62%\|.*\| 5\.00M/8\.00M \[00:00<00:0\d, +[\d.]+[kMG]?B/s\]", text), text
    assert not LINE.search(text)  # no plain lines on a terminal


def test_human_sizes_and_durations():
    assert [human_size(n) for n in (0, 532, 1024, 5325, 1023 * 1024, 15 * 2**30)] == [
        "0 B", "532 B", "1.00 KiB", "5.20 KiB", "1.00 MiB", "15.0 GiB"]
    assert [human_duration(s) for s in (5, 62, 3725)] == ["5s", "1m02s", "1h02m05s"]


@pytest.mark.parametrize("verb", VERB_MODULES)
def test_every_verb_takes_quiet_and_verbose(verb):
    parser = build_parser()
    sub = parser.verb_parsers[next(name for name in parser.verb_parsers if name.startswith(verb.split("_")[0]))]
    actions = {opt for a in sub._actions for opt in a.option_strings}
    assert {"-q", "--quiet", "-v", "--verbose"} <= actions


def test_check_and_diff_say_more_with_verbose(tmp_path, capsys):
    nohead = REPO / "specs" / "qwen35-tiny-nohead.yaml"
    capsys.readouterr()
    assert main(["check", str(nohead), "-v"]) == 0
    assert re.search(rf"^mtpc: \[ *[\d.]+s\] checked {re.escape(str(nohead))} \(spec\): 0 findings$", capsys.readouterr().err, re.M)
    assert main(["diff", str(TINY), str(nohead), "-v"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^mtpc: \[ *[\d.]+s\] <ir>: \d+ change\(s\)$", err, re.M), err
    assert main(["diff", str(TINY), str(nohead)]) == 1
    assert capsys.readouterr().err == ""
