"""What the real huggingface_hub client asks the fixture hub for, request by request: the fixture serves these
and nothing else (`unexpected` lists any other), so a client that starts asking something new fails here first."""

from __future__ import annotations

from .conftest import REPO, run_mtpc


def test_inspect_of_a_repo_asks_the_revision_the_listing_the_small_files_and_the_shard_headers(hub, env, tmp_path):
    hub.reset()
    proc = run_mtpc("inspect", REPO, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    commit = hub.repos[REPO].refs["main"]
    resolve = f"/{REPO}/resolve/{commit}/"
    asked = [(r.method, r.path.replace(resolve, "resolve:"), r.query, r.range and r.range.split("-")[0]) for r in hub.requests]
    assert asked == [
        ("GET", f"/api/models/{REPO}", "", None),  # HfApi.resolve_revision -> repo_info (no revision: the default)
        ("GET", f"/api/models/{REPO}/tree/{commit}", "recursive=true&expand=false", None),  # list_repo_tree
        *[(method, f"resolve:{name}", "", None)  # hf_hub_download: HEAD for the ETag, then the file
          for name in ("config.json", "generation_config.json", "model.safetensors.index.json", "README.md")
          for method in ("HEAD", "GET")],
        ("GET", "resolve:model-00001-of-00002.safetensors", "", "bytes=0"),  # the headers, by range
        ("GET", "resolve:model-00002-of-00002.safetensors", "", "bytes=0"),
    ]
    assert {r.status for r in hub.requests} == {200, 206} and not hub.unexpected
