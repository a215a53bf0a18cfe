"""`compile` of `hf: owner/name`: the first run fills an empty cache with what compile reads (and sends the token),
a second one offline reads only the cache and writes the same bytes, and a download cut part-way resumes."""

from __future__ import annotations

import json

from mtpc.api import compile as compile_package
from tests.fixtures.hub_server import FixtureRepo, HubServer, hub_env

from .conftest import READ, REPO, TOKEN, package_files, run_mtpc, write_spec

SHARD = "model-00002-of-00002.safetensors"


def test_first_compile_fills_the_cache_and_a_second_offline_writes_the_same_bytes(repo_folder, tmp_path):
    server = HubServer({REPO: FixtureRepo.of(repo_folder)}, token=TOKEN).start()
    env = hub_env(server, tmp_path / "hf-home", token=TOKEN)
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    try:
        # a progress line per piece downloaded (as a log gets one every MTPC_PROGRESS_INTERVAL seconds)
        first = run_mtpc("compile", str(spec), "-o", str(tmp_path / "first"), env={**env, "MTPC_PROGRESS_INTERVAL": "0"},
                         cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert not server.unexpected
        assert {r.authorization for r in server.requests} == {f"Bearer {TOKEN}"}
        whole = {r.path.rsplit("/", 1)[-1] for r in server.requests if r.method == "GET" and r.range is None
                 and "/resolve/" in r.path}
        assert whole == set(READ)  # neither the vision shard nor another format
        listed = json.loads((repo_folder / "model.safetensors.index.json").read_text())["weight_map"]
        assert "model-vision.safetensors" in listed.values()
        assert f"downloading {len(READ) - 4} files of {REPO}@" in first.stderr  # the small files came with the description
        progress = [line for line in first.stderr.splitlines() if line.startswith("mtpc: downloading: ")]
        assert any(" MiB / 1.52 MiB (" in line and "/s, ETA " in line for line in progress), progress
        assert progress[-1].startswith("mtpc: downloading: 1.52 MiB in "), progress
    finally:
        server.stop()

    cache = tmp_path / "hf-home" / "hub" / "models--acme--tiny-mtp"
    commit = (cache / "refs" / "main").read_text()
    snapshot = cache / "snapshots" / commit
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(READ)
    assert (cache / "trees" / f"{commit}.json").is_file()  # the listing, for offline runs

    second = run_mtpc("compile", str(spec), "-o", str(tmp_path / "second"), env={**env, "HF_HUB_OFFLINE": "1"},
                      cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "downloading" not in second.stderr
    first_files = package_files(tmp_path / "first")
    assert package_files(tmp_path / "second") == first_files

    provenance = json.loads(first_files["provenance.json"])["source"]
    assert provenance["hub"] == {"repo": REPO, "revision": "main", "commit": commit}
    assert [f["name"] for f in provenance["files"]] == sorted(READ)
    for f in provenance["files"]:  # the hub's hash of each file names its blob in the cache
        assert (snapshot / f["name"]).resolve().name == f["hub_etag"]
        assert (snapshot / f["name"]).stat().st_size == f["bytes"]
    card = first_files["README.md"].decode()
    assert f"base_model: {REPO}\n" in card and "license: apache-2.0\n" in card

    # The same commit compiled from its folder in the cache: the same package, but for where it says it came from.
    folder = tmp_path / "from-folder"
    folder.mkdir()
    compile_package(write_spec(folder, f"{{hf: {snapshot}}}"), folder / "package")
    from_folder = package_files(folder / "package")
    assert {k for k in first_files if first_files[k] != from_folder.get(k)} == {"provenance.json", "manifest.json"}


def test_an_interrupted_download_is_a_clear_error_and_the_next_run_resumes_it(repo_folder, checkpoint, tmp_path):
    server = HubServer({REPO: FixtureRepo.of(repo_folder)}, token=TOKEN).start()
    env = hub_env(server, tmp_path / "hf-home", token=TOKEN)
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    size = (repo_folder / SHARD).stat().st_size
    try:
        server.interrupt(SHARD, after=300_000, then_fail=True)
        cut = run_mtpc("compile", str(spec), "-o", str(tmp_path / "out"), env=env, cwd=tmp_path)
        assert cut.returncode == 2, cut.stderr
        assert (f"{spec}:3:14: error: {REPO}: the download of {SHARD} stopped after 293 KiB of {size / 1024:.0f} KiB "
                f"(kept in the cache; the next run resumes it): the hub at {server.url} answered 503") in cut.stderr
        assert "   3 | source: {hf: acme/tiny-mtp}\n" in cut.stderr
        assert "Traceback" not in cut.stderr
        assert not (tmp_path / "out").exists()
        partial = list((tmp_path / "hf-home" / "hub" / "models--acme--tiny-mtp" / "blobs").glob("*.incomplete"))
        assert [p.stat().st_size for p in partial] == [300_000]

        server.recover()
        server.reset()
        resumed = run_mtpc("compile", str(spec), "-o", str(tmp_path / "out"), env=env, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        gets = [(r.range, r.body_bytes) for r in server.requests if r.method == "GET" and r.path.endswith(SHARD)]
        header = [g for g in gets if g[0] is not None and g[0].startswith("bytes=0-")]  # describe's header read
        assert [g for g in gets if g not in header] == [("bytes=300000-", size - 300_000)]
        assert not partial[0].exists()
    finally:
        server.stop()
    reference = tmp_path / "reference"
    reference.mkdir()
    compile_package(write_spec(reference, f"{{hf: {checkpoint}}}"), reference / "package")
    expected, got = package_files(reference / "package"), package_files(tmp_path / "out")
    for name in ("model.onnx.data", "mtp/mtp.onnx.data", "model.onnx", "tokenizer.json"):
        assert got[name] == expected[name], name
