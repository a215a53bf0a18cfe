"""The metadata verbs on a hub repo read config.json and the shards' headers by range request, never a weight;
`check --offline` makes no request at all; `revision` picks a branch, tag or commit."""

from __future__ import annotations

import json
import shutil

from tests.fixtures.hub_server import FixtureRepo, HubServer, hub_env

from .conftest import REPO, TOKEN, run_mtpc, write_spec

SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _shard_reads(server) -> list[tuple[str | None, int]]:
    return [(r.range, r.body_bytes) for r in server.requests if r.method == "GET" and r.path.endswith(".safetensors")]


def test_inspect_plan_and_diff_read_headers_not_weights(hub, env, tmp_path, repo_folder):
    hub.reset()
    proc = run_mtpc("inspect", REPO, "--format", "json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    commit = hub.repos[REPO].refs["main"]
    assert doc["source"]["hub"] == {"repo": REPO, "revision": None, "commit": commit, "file": None}
    assert doc["has_mtp_head"] and doc["tokenizer_files"] == ["tokenizer.json", "tokenizer_config.json"]
    reads = _shard_reads(hub)
    assert len(reads) == 2 and all(r is not None and r.startswith("bytes=0-") for r, _ in reads), reads
    assert sum(n for _, n in reads) < sum((repo_folder / s).stat().st_size for s in SHARDS) // 20, reads
    assert not hub.unexpected

    hub.reset()
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    tagged = write_spec(tmp_path, f"{{hf: {REPO}, revision: v1}}", name="tagged")
    for verb in (["plan", str(spec), "-q"], ["diff", str(spec), str(tagged)]):
        proc = run_mtpc(*verb, env=env, cwd=tmp_path)
        assert proc.returncode in (0, 1), proc.stderr
        assert all(r is not None for r, _ in _shard_reads(hub)), verb  # ranges only: no shard downloaded
    assert not list((tmp_path / "hf-home" / "hub" / "models--acme--tiny-mtp" / "blobs").glob("*.incomplete"))


def test_check_offline_makes_no_request_and_says_what_the_cache_lacks(repo_folder, tmp_path):
    server = HubServer({REPO: FixtureRepo.of(repo_folder)}, token=TOKEN).start()
    env = hub_env(server, tmp_path / "hf-home", token=TOKEN)
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    try:
        empty = run_mtpc("check", "--offline", str(spec), env=env, cwd=tmp_path)
        assert empty.returncode == 0, empty.stderr
        assert server.requests == []
        assert (f"{spec}:3:14: note: checked offline, no request made: {REPO}: cannot resolve its revision: "
                "HF_HUB_OFFLINE is set and the cache") in empty.stdout + empty.stderr
        compiled = run_mtpc("compile", str(spec), "-o", str(tmp_path / "pkg"), env=env, cwd=tmp_path)
        assert compiled.returncode == 0, compiled.stderr
        server.reset()
        cached = run_mtpc("check", "--offline", str(spec), env=env, cwd=tmp_path)
        assert cached.returncode == 0, cached.stderr
        assert server.requests == []
        assert "note:" not in cached.stdout + cached.stderr  # checked in full, from the cache
    finally:
        server.stop()


def test_a_revision_names_a_branch_tag_or_commit(repo_folder, tmp_path):
    dev = tmp_path / "dev-branch"
    shutil.copytree(repo_folder, dev)
    config = json.loads((dev / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = 1024
    (dev / "config.json").write_text(json.dumps(config))
    repo = FixtureRepo.of(repo_folder, tags=("v1",))
    dev_commit = repo.add_commit(dev, branch="dev")
    server = HubServer({REPO: repo}, token=TOKEN).start()
    env = hub_env(server, tmp_path / "hf-home", token=TOKEN)
    try:
        contexts = {}
        for revision in ("dev", dev_commit, "v1"):
            proc = run_mtpc("inspect", REPO, "--revision", revision, "--format", "json", env=env, cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
            doc = json.loads(proc.stdout)
            contexts[revision] = (doc["source"]["hub"]["commit"], doc["architecture"]["context_length"])
        assert contexts == {"dev": (dev_commit, 1024), dev_commit: (dev_commit, 1024),
                            "v1": (repo.refs["main"], contexts["v1"][1])}
        assert contexts["v1"][1] != 1024
        spec = write_spec(tmp_path, f"{{hf: {REPO}, revision: dev}}")
        proc = run_mtpc("compile", str(spec), "-o", str(tmp_path / "pkg"), env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    finally:
        server.stop()
    provenance = json.loads((tmp_path / "pkg" / "provenance.json").read_text())
    assert provenance["source"]["hub"] == {"repo": REPO, "revision": "dev", "commit": dev_commit}
    # the commit a branch named is remembered: offline, the same spec reads the same commit from the cache
    proc = run_mtpc("compile", str(spec), "-o", str(tmp_path / "again"), env={**env, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "again" / "provenance.json").read_bytes() == (tmp_path / "pkg" / "provenance.json").read_bytes()
