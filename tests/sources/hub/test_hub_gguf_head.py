"""A hub GGUF target's MTP head file: paired from its repo as llama.cpp's `-hf ... --spec-type draft-mtp` pairs one
(llama.cpp itself, run against the fixture hub, is the oracle of the order), or named by `source.head` as a file of
the same repo; compiled to the one-file GGUF's package, offline the second time; refusals at the spec field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mtpc.api import compile as compile_package
from mtpc.sources.gguf.siblings import ranked
from mtpc.sources.hub.gguf_choice import choose
from tests.clients import llama_cpp_runtime
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.hub_server import FixtureRepo, HubServer, hub_env
from tests.fixtures.llama_cpp_tools import built
from tests.fixtures.two_file_gguf import split

from .conftest import package_files, run_mtpc, write_spec

REPO = "acme/Tiny-GGUF"


@pytest.fixture(scope="module")
def one_file(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("one") / "Tiny-F32.gguf", tiny_arch(), seed=0, recurrent_layers=True,
                      tokenizer=True)


@pytest.fixture(scope="module")
def two_file_repo(one_file, tmp_path_factory) -> Path:
    """The target (--no-mtp), its head file (--mtp) and another model's head file listed before it (a tie in bits,
    the first name), as a repo publishing both would hold them."""
    folder = tmp_path_factory.mktemp("two-file-repo")
    split(one_file, folder / "Tiny-F32.gguf", folder / "mtp-Tiny-F32.gguf")
    other = tmp_path_factory.mktemp("other")
    split(one_file, other / "Wide.gguf", folder / "mtp-Other-F32.gguf", head_fields={"qwen35.embedding_length": 128})
    return folder


# (the repo's files, the tag asked, the mtp- file llama.cpp pairs): its folder, deepest first; the tag; the bits
LISTINGS = [
    (("Tiny-Q8_0.gguf", "mtp-Tiny-F32.gguf", "mtp-Tiny-Q4_0.gguf", "mtp-Tiny-Q8_0.gguf"), None, "mtp-Tiny-Q8_0.gguf"),
    (("Tiny-Q4_K_M.gguf", "mtp-Tiny-Q4_0.gguf", "mtp-Tiny-Q4_K_M.gguf", "mtp-Tiny-Q5_K_M.gguf"), "Q4_K_M",
     "mtp-Tiny-Q4_K_M.gguf"),
    (("F32/mtp-Tiny-Q8_0.gguf", "Q8_0/Tiny-Q8_0.gguf", "Q8_0/mtp-Tiny-F32.gguf", "mtp-Tiny-Q8_0.gguf"), "Q8_0",
     "Q8_0/mtp-Tiny-F32.gguf"),
    (("Hf-265K-F32.gguf", "mtp-Hf-F32.gguf", "mtp-Hf-Q8_0.gguf"), None, "mtp-Hf-F32.gguf"),
    (("Tiny-Q8_0.gguf", "mtp-a-Q8_0.gguf", "mtp-b-Q8_0.gguf"), None, "mtp-a-Q8_0.gguf"),
]


def test_the_head_file_llama_cpp_pairs_from_a_repo_is_the_first_ranked(one_file, tmp_path):
    """llama.cpp's `-hf REPO[:TAG] --spec-type draft-mtp` downloads the model file and the mtp- file
    `find_best_sibling` picks into the hub cache (it then fails to load these fixtures, which does not matter)."""
    binary = built(llama_cpp_runtime.TARGET)
    repos = {}
    for i, (files, _, _) in enumerate(LISTINGS):
        for path in files:
            (tmp_path / f"case{i}" / path).parent.mkdir(parents=True, exist_ok=True)
            os.link(one_file, tmp_path / f"case{i}" / path)
        repos[f"acme/case{i}-GGUF"] = FixtureRepo.of(tmp_path / f"case{i}")
    with HubServer(repos) as server:
        for i, (files, tag, expected) in enumerate(LISTINGS):
            cache = tmp_path / f"llama-cache{i}"
            subprocess.run([str(binary), "-hf", f"acme/case{i}-GGUF" + (f":{tag}" if tag else ""), "--spec-type",
                            "draft-mtp", "-n", "1", "-p", "hi", "-t", "1", "--no-repack"],
                           env=hub_env(server, cache), capture_output=True, timeout=120)
            snapshot = next((cache / "hub" / f"models--acme--case{i}-GGUF" / "snapshots").iterdir())
            heads = sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.gguf") if "mtp-" in p.name)
            assert heads == [expected], (files, tag, heads)
            assert ranked(files, choose(files, tag), tag)[0] == expected, (files, tag)


def test_a_hub_target_compiles_with_its_head_file_as_the_one_file_gguf_and_offline_the_second_time(
        one_file, two_file_repo, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    shutil.copy(one_file, local / "Tiny-F32.gguf")
    compile_package(write_spec(local, "{gguf: Tiny-F32.gguf}"), local / "pkg")
    expected = package_files(local / "pkg")

    server = HubServer({REPO: FixtureRepo.of(two_file_repo)}).start()
    env = hub_env(server, tmp_path / "hf-home")
    try:
        proc = run_mtpc("inspect", REPO, "--format", "json", env=hub_env(server, tmp_path / "inspect-home"), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["source"]["hub"]["file"] == "Tiny-F32.gguf" and doc["source"]["hub"]["head"] == "mtp-Tiny-F32.gguf"
        assert doc["has_mtp_head"] is True
        assert any(n.startswith("mtp-Other-F32.gguf of acme/Tiny-GGUF@") and "(qwen35.embedding_length is 128 there, "
                   "64 in the target): not paired" in n for n in doc["notes"]), doc["notes"]
        gguf_reads = [r for r in server.requests if r.path.endswith(".gguf")]
        assert gguf_reads and all(r.range is not None and r.range.startswith("bytes=0-") for r in gguf_reads)
        assert sum(r.body_bytes for r in gguf_reads) < sum(p.stat().st_size for p in two_file_repo.iterdir())

        folder = tmp_path / "hub"
        folder.mkdir()
        spec = write_spec(folder, f"{{gguf: {REPO}}}")
        proc = run_mtpc("compile", str(spec), "-o", str(folder / "pkg"), env=env, cwd=folder)
        assert proc.returncode == 0, proc.stderr
        assert "downloading 2 files of acme/Tiny-GGUF@" in proc.stderr, proc.stderr  # the target and its head file
    finally:
        server.stop()
    first = package_files(folder / "pkg")
    assert {k for k in first if first[k] != expected.get(k)} == {"provenance.json", "manifest.json", "README.md"}
    files = json.loads(first["provenance.json"])["source"]["files"]
    assert [f["name"] for f in files] == ["Tiny-F32.gguf", "mtp-Tiny-F32.gguf"]

    proc = run_mtpc("compile", str(spec), "-o", str(folder / "again"), env={**env, "HF_HUB_OFFLINE": "1"}, cwd=folder)
    assert proc.returncode == 0, proc.stderr  # the server stopped: the two files and the listing from the cache
    assert "downloading" not in proc.stderr
    assert package_files(folder / "again") == first


@pytest.mark.parametrize("head,message", [
    ("mtp-Tiny-F23.gguf", "the repo has no file 'mtp-Tiny-F23.gguf' for source.head to name (a file of the target's "
                          "repo and revision); its mtp- files: mtp-Other-F32.gguf, mtp-Tiny-F32.gguf"),
    ("mtp-Other-F32.gguf", "/mtp-Other-F32.gguf is not the MTP head of acme/Tiny-GGUF@"),
])
def test_a_named_head_file_the_repo_lacks_or_of_another_model_is_refused_at_source_head(
        two_file_repo, tmp_path, head, message):
    spec = tmp_path / "named.yaml"
    spec.write_text(f"mtpc: 1\nname: named\nsource:\n  gguf: {REPO}\n  head: {head}\n", encoding="utf-8")
    with HubServer({REPO: FixtureRepo.of(two_file_repo)}) as server:
        proc = run_mtpc("check", str(spec), env=hub_env(server, tmp_path / "hf-home"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and f"named.yaml:5:9: error: " in proc.stderr, proc.stderr
    if head == "mtp-Other-F32.gguf":  # both files named, and the first difference
        assert "/Tiny-F32.gguf: qwen35.embedding_length is 128 there, 64 in the target" in proc.stderr, proc.stderr
