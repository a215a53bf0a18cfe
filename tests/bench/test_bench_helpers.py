"""The bench helpers that need no competitor: the 27B-shaped sparse GGUF and the verdicts of the table."""

import os

from bench.metadata_verbs import table as verbs_table
from bench.sparse_source import architecture_27b, write, write_hf
from bench.vs_builder import alternating, cpu_table, table
from mtpc import sources
from mtpc.ir import SourceRef


def test_the_sparse_27b_gguf_has_the_full_header_and_no_weight_bytes(tmp_path):
    path = write(tmp_path / "q27.gguf", architecture_27b())
    claimed, on_disk = path.stat().st_size, os.stat(path).st_blocks * 512
    assert claimed > 15e9 and on_disk < 50e6
    info = sources.describe(SourceRef("gguf", str(path)))
    arch = info.architecture
    assert (arch.hidden_size, arch.num_layers, arch.vocab_size, arch.mtp_num_layers) == (5120, 64, 248320, 1)
    assert dict(info.storage)["attn_q"] == "Q4_0" and set(info.tokenizer_names) == {"tokenizer.json", "tokenizer_config.json"}


def test_the_sparse_27b_hf_folder_has_every_header_and_no_weight_bytes(tmp_path):
    folder = write_hf(tmp_path / "q27", architecture_27b())
    shards = sorted(folder.glob("*.safetensors"))
    claimed, on_disk = sum(p.stat().st_size for p in shards), sum(os.stat(p).st_blocks * 512 for p in shards)
    assert len(shards) > 10 and claimed > 50e9 and on_disk < 50e6
    info = sources.describe(SourceRef("hf", str(folder)))
    arch = info.architecture
    assert arch == architecture_27b()
    assert dict(info.storage)["self_attn.q_proj.weight"] == "BF16"
    assert set(info.tokenizer_names) == {"tokenizer.json", "tokenizer_config.json"}
    assert dict(info.facts)["safetensors_files"] == len(shards)


def test_the_metadata_verbs_table_says_met_or_missed_and_whether_outputs_agree():
    def run(wall, out=b"x"):
        return {"wall_s": wall, "cpu_s": wall / 2, "exit": 0, "stdout": out}

    runs = {("main", "-", "--help"): [run(0.1)], ("this", "-", "--help"): [run(0.2)]}
    for kind in ("gguf", "hf"):
        for verb in ("inspect", "check", "plan", "diff"):
            runs[("main", kind, verb)] = [run(1.0), run(3.0), run(2.0)]
            runs[("this", kind, verb)] = [run(0.2), run(0.25), run(0.5, b"y" if verb == "diff" else b"x")]
    text = verbs_table({"runs": runs, "load": (1.0, 2.0), "codes": ["main", "this"]})
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines() if line.startswith("| G")
            or line.startswith("| H")}
    assert rows[("GGUF", "inspect")].endswith("| 2.000 | 1.000 | 0.250 | 0.200 | 0.125 | <= 0.3 | met | yes |")
    assert rows[("HF", "diff")].endswith("| NO |")  # one run printed something else
    assert "|  | --help | 0.100 | 0.050 | 0.200 | 0.200 | 0.100 | <= 0.15 | missed | yes |" in text


def _measured(wall: float, rss: int, size: int) -> dict:
    return {"wall_s": wall, "peak_rss": rss, "bytes": size}


def test_the_table_says_met_or_missed_against_each_goal():
    results = {
        "compile": {
            ("mtpc", "fp32"): _measured(2.0, 100, 1010), ("builder", "fp32"): _measured(10.0, 1000, 1000),
            ("mtpc", "int4"): _measured(5.0, 100, 900), ("builder", "int4"): _measured(10.0, 100, 1000),
        },
        "copy_s": 1.0,
        "decode": {("fp32", 1): (10.0, 10.0), ("fp32", 2): (9.0, 10.0)},
        "llama": {("Q4_0", 1): (12.0, 10.0)},
        "verbs": {"mtpc --help": 0.1, "inspect": 0.5},
    }
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table(results).splitlines() if line.startswith("| ")}
    assert rows["compile wall fp32, mtpc / builder"].endswith("| 0.20 | <= 0.40 | met |")
    assert rows["compile wall int4, mtpc / builder"].endswith("| 0.50 | <= 0.40 | missed |")
    assert rows["compile wall fp32, mtpc / `cp -r && sync`"].endswith("| 2.00 | <= 2.0 | met |")
    assert rows["compile peak RSS int4, mtpc / builder"].endswith("| 1.00 | <= 0.40 | missed |")
    assert rows["package bytes fp32, mtpc / builder"].endswith("| 1.01 | <= 1.01 | met |")
    assert rows["decode tok/s fp32, 2 threads, mtpc / builder"].endswith("| 0.90 | >= 1.0 | missed |")
    assert rows["decode tok/s Q4_0 GGUF, 1 thread, mtpc (og) / llama.cpp"].endswith("| 1.20 | >= 1.0 | met |")
    assert rows["inspect"].endswith("| 0.50 | <= 0.3 | missed |") and rows["mtpc --help"].endswith("met |")


def test_the_table_reports_the_write_floor_and_the_27b_compile():
    fp32 = {**_measured(3.0, 100, 1000), "write_floor_s": 1.5}
    results = {
        "compile": {("mtpc", "fp32"): fp32, ("builder", "fp32"): _measured(10.0, 1000, 1000),
                    ("mtpc", "int4"): _measured(5.0, 100, 900), ("builder", "int4"): _measured(10.0, 100, 1000)},
        "copy_s": 1.0,
        "big": {"copy_s": 30.0, "compile_s": 45.0, "sync_after_s": 15.0, "peak_anon": 2**29, "peak_rss": 2**31,
                "gguf_bytes": 16.7e9, "package_bytes": 18.4e9},
    }
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table(results).splitlines() if line.startswith("| ")}
    assert rows["compile wall fp32, mtpc / `cp -r && sync` of its own package (the bytes it writes)"].endswith("| 2.00 |  |  |")
    assert rows["compile / `cp && sync`"].endswith("| 1.50 | <= 2.0 | met |")
    assert rows["peak anonymous memory GiB"].endswith("| 0.50 | <= 1.0 | met |")
    assert rows["(compile + the `sync` after it) / `cp && sync`"].endswith("| 2.00 | | |")


def test_decode_runs_alternate_and_who_goes_first_alternates_too():
    calls = []
    ours, theirs = alternating(lambda: calls.append("a") or len(calls), lambda: calls.append("b") or len(calls), 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert (ours, theirs) == ([1, 4, 5], [2, 3, 6])


def test_the_cpu_second_table_has_a_ratio_per_package_and_thread_count():
    text = cpu_table({("int4", 2): (90.0, 100.0), ("fp32", 1): (30.0, 20.0)})
    assert text.splitlines()[2:] == ["| fp32 | 1 | 30.0 | 20.0 | 1.50 |", "| int4 | 2 | 90.0 | 100.0 | 0.90 |"]
