"""`gguf:` on the hub: `owner/name[:QUANT]` picks the file as llama.cpp's `-hf` does (llama.cpp itself, run against
the fixture hub, is the oracle), `{repo, file}` names it; the metadata verbs read its header alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from mtpc.api import compile as compile_package
from mtpc.sources.hub.gguf_choice import choose
from tests.clients import llama_cpp_runtime
from tests.fixtures.checkpoints import tiny_arch
from tests.fixtures.gguf_writer import MIXED_TYPES, write_gguf
from tests.fixtures.hub_server import FixtureRepo, HubServer, hub_env
from tests.fixtures.llama_cpp_tools import built

from .conftest import package_files, run_mtpc, write_spec

GGUF_REPO = "acme/tiny-GGUF"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-gguf")
    write_gguf(folder / "tiny-F32.gguf", tiny_arch(), recurrent_layers=True)
    write_gguf(folder / "tiny-Q8_0.gguf", tiny_arch(), types=MIXED_TYPES, recurrent_layers=True)
    return folder


def _repo(folder, files: dict[str, str], ggufs):
    """A repo folder whose `files` (path in the repo -> the fixture GGUF it copies) are hard links."""
    for path, source in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        os.link(ggufs / source, folder / path)
    return folder


# (the repo's GGUF files, the tag asked): what llama.cpp's `-hf` picks is what `choose` picks
LISTINGS = [
    ({"tiny-F32.gguf": "tiny-F32.gguf", "tiny-Q8_0.gguf": "tiny-Q8_0.gguf", "mmproj-tiny-Q8_0.gguf": "tiny-Q8_0.gguf"}, None),
    ({"tiny-F32.gguf": "tiny-F32.gguf", "tiny-Q8_0.gguf": "tiny-Q8_0.gguf"}, "f32"),
    ({"mtp-tiny-Q4_K_M.gguf": "tiny-Q8_0.gguf", "tiny-Q4_K_M.gguf": "tiny-Q8_0.gguf", "tiny-Q8_0.gguf": "tiny-Q8_0.gguf"}, None),
    ({"tiny-F16.gguf": "tiny-F32.gguf", "tiny-F32.gguf": "tiny-F32.gguf", "tiny-imatrix.gguf": "tiny-F32.gguf"}, None),
    ({"Q4_K_M/tiny-Q4_K_M-00002-of-00002.gguf": "tiny-Q8_0.gguf", "Q4_K_M/tiny-Q4_K_M-00001-of-00002.gguf": "tiny-Q8_0.gguf",
      "tiny-Q8_0.gguf": "tiny-Q8_0.gguf"}, None),
]


def test_the_quant_tag_picks_the_file_llama_cpp_picks(ggufs, tmp_path):
    """llama.cpp's `-hf REPO[:TAG]` (llama-speculative-simple, common/download.cpp) downloads the file it picks into
    the same hub cache layout; what lands in the snapshot is its choice (it then fails to load these tokenizer-less
    fixtures, which does not matter here)."""
    binary = built(llama_cpp_runtime.TARGET)
    repos = {f"acme/case{i}-GGUF": FixtureRepo.of(_repo(tmp_path / f"case{i}", files, ggufs))
             for i, (files, _) in enumerate(LISTINGS)}
    with HubServer(repos) as server:
        for i, (files, tag) in enumerate(LISTINGS):
            repo = f"acme/case{i}-GGUF"
            cache = tmp_path / f"llama-cache{i}"
            subprocess.run([str(binary), "-hf", repo + (f":{tag}" if tag else ""), "-n", "1", "-p", "hi", "-t", "1",
                            "--no-repack"], env=hub_env(server, cache), capture_output=True, timeout=120)
            snapshot = next((cache / "hub" / "models--acme--" f"case{i}-GGUF" / "snapshots").iterdir())
            downloaded = sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.gguf"))
            picked = choose(files, tag)
            assert picked in downloaded, (files, tag, downloaded)
            # llama.cpp downloads every part of a split file; the first is the one it loads
            assert downloaded == sorted(f for f in files if f == picked or (picked.endswith("-00001-of-00002.gguf")
                                                                                and f.startswith(picked[:-len("00001-of-00002.gguf")])))


def test_a_hub_gguf_compiles_as_its_file_does_and_inspect_reads_its_header_alone(ggufs, tmp_path):
    repo = _repo(tmp_path / "repo", {"tiny-F32.gguf": "tiny-F32.gguf", "tiny-Q8_0.gguf": "tiny-Q8_0.gguf",
                                     "mmproj-tiny-Q8_0.gguf": "tiny-Q8_0.gguf"}, ggufs)
    size = (ggufs / "tiny-Q8_0.gguf").stat().st_size
    with HubServer({GGUF_REPO: FixtureRepo.of(repo)}) as server:
        env = hub_env(server, tmp_path / "hf-home")
        proc = run_mtpc("inspect", GGUF_REPO, "--format", "json", env=env, cwd=tmp_path)  # no tag: Q4_K_M, then Q8_0
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["source"]["kind"] == "gguf" and doc["source"]["hub"]["file"] == "tiny-Q8_0.gguf"
        reads = [(r.range, r.body_bytes) for r in server.requests if r.path.endswith(".gguf")]
        assert reads == [("bytes=0-65535", 65536)] and size > 4 * 65536, reads  # the header, not the file

        for name, source in (("tagged", f"{{gguf: '{GGUF_REPO}:q8_0'}}"),
                             ("named", f"{{gguf: {{repo: {GGUF_REPO}, file: tiny-Q8_0.gguf}}}}")):
            folder = tmp_path / name
            folder.mkdir()
            proc = run_mtpc("compile", str(write_spec(folder, source)), "-o", str(folder / "pkg"), env=env, cwd=folder)
            assert proc.returncode == 0, proc.stderr
    local = tmp_path / "local"
    local.mkdir()
    shutil.copy(ggufs / "tiny-Q8_0.gguf", local / "tiny-Q8_0.gguf")
    compile_package(write_spec(local, "{gguf: tiny-Q8_0.gguf}"), local / "pkg")
    expected = package_files(local / "pkg")
    for name in ("tagged", "named"):
        got = package_files(tmp_path / name / "pkg")
        assert {k for k in got if got[k] != expected.get(k)} == {"provenance.json", "manifest.json", "README.md"}
        assert f"base_model: {GGUF_REPO}\n" in got["README.md"].decode()
        source = json.loads(got["provenance.json"])["source"]
        assert source["kind"] == "gguf" and [f["name"] for f in source["files"]] == ["tiny-Q8_0.gguf"]
    assert package_files(tmp_path / "tagged" / "pkg")["provenance.json"] != package_files(tmp_path / "named" / "pkg")["provenance.json"]


def test_a_split_or_missing_file_is_refused_naming_the_repo_s_files(ggufs, tmp_path):
    repo = _repo(tmp_path / "repo", {"tiny-Q4_K_M-00001-of-00002.gguf": "tiny-Q8_0.gguf",
                                     "tiny-Q4_K_M-00002-of-00002.gguf": "tiny-Q8_0.gguf", "tiny-F32.gguf": "tiny-F32.gguf"}, ggufs)
    with HubServer({GGUF_REPO: FixtureRepo.of(repo)}) as server:
        env = hub_env(server, tmp_path / "hf-home")
        split = run_mtpc("check", str(write_spec(tmp_path, f"{{gguf: {GGUF_REPO}}}")), env=env, cwd=tmp_path)
        assert split.returncode == 2
        assert (f"{GGUF_REPO}@{FixtureRepo.of(repo).refs['main'][:12]}: tiny-Q4_K_M-00001-of-00002.gguf is split in 2 "
                "parts (tiny-Q4_K_M-00001-of-00002.gguf, tiny-Q4_K_M-00002-of-00002.gguf); mtpc reads a GGUF in one file") \
            in split.stderr
        missing = run_mtpc("check", str(write_spec(tmp_path, f"{{gguf: '{GGUF_REPO}:IQ2_XXS'}}", name="missing")),
                           env=env, cwd=tmp_path)
        assert missing.returncode == 2
        assert ("no GGUF file for quant tag IQ2_XXS (its GGUF files: tiny-F32.gguf, tiny-Q4_K_M-00001-of-00002.gguf, "
                "tiny-Q4_K_M-00002-of-00002.gguf)") in missing.stderr
