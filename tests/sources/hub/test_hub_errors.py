"""Bad hub input: each a clear error at the spec's `source` line, exit 2, nothing written, no traceback."""

from __future__ import annotations

import pytest

from tests.fixtures.hub_server import hub_env

from .conftest import GATED, OTHER_TOKEN, REPO, TOKEN, run_mtpc, write_spec


def _refused(spec, env, tmp_path, verb: str = "check") -> str:
    args = [verb, str(spec)] + (["-o", str(tmp_path / "out")] if verb == "compile" else [])
    proc = run_mtpc(*args, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
    return proc.stderr


def test_a_gated_repo_without_a_token_is_a_clear_error(hub, tmp_path):
    spec = write_spec(tmp_path, f"{{hf: {GATED}}}")
    got = _refused(spec, hub_env(hub, tmp_path / "hf-home"), tmp_path, verb="compile")
    assert got == (
        f"{spec}:3:14: error: {GATED}: cannot download config.json: the repo is gated: the hub wants a token of an "
        "account that has accepted its conditions (the hub answered 401; no token: HF_TOKEN is not set)\n"
        f"   3 | source: {{hf: {GATED}}}\n"
        f"                    {'^' * len(GATED)}\n"
    )
    assert [r.status for r in hub.requests if r.path.endswith("/config.json")][-1] == 401


def test_a_gated_repo_with_a_token_without_access_is_403(hub, tmp_path):
    spec = write_spec(tmp_path, f"{{hf: {GATED}}}")
    got = _refused(spec, hub_env(hub, tmp_path / "hf-home", token=OTHER_TOKEN), tmp_path)
    assert (f"{GATED}: cannot download config.json: the repo is gated and the token has no access to it (the hub "
            f"answered 403: accept the repo's conditions on its page, {hub.url}/{GATED}, with the account of HF_TOKEN)") in got


@pytest.mark.parametrize("source, message", [
    ("{hf: acme/no-such-repo}", "acme/no-such-repo: cannot resolve its revision: no such repo on {url} (the hub answered "
                                "404: it does not exist, or it is private and the token has no access)"),
    ("{hf: acme/tiny-mtp, revision: v9}", "acme/tiny-mtp@v9: cannot resolve its revision: the repo has no revision 'v9' "
                                          "(a branch, tag or commit; the hub answered 404)"),
])
def test_an_unknown_repo_or_revision_is_a_clear_error(hub, tmp_path, source, message):
    spec = write_spec(tmp_path, source)
    got = _refused(spec, hub_env(hub, tmp_path / "hf-home", token=TOKEN), tmp_path)
    assert got.startswith(f"{spec}:3:") and message.format(url=hub.url) in got, got


def test_a_token_the_hub_does_not_know_is_a_clear_error(hub, tmp_path):
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    got = _refused(spec, hub_env(hub, tmp_path / "hf-home", token="hf_revoked"), tmp_path)
    assert (f"{REPO}: cannot resolve its revision: the hub refused the token (401: Invalid credentials in Authorization "
            "header; HF_TOKEN is set)") in got


def test_offline_without_the_files_in_the_cache_is_a_clear_error(hub, tmp_path):
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    hub.reset()
    got = _refused(spec, hub_env(hub, tmp_path / "hf-home", token=TOKEN, offline=True), tmp_path, verb="compile")
    assert (f"{REPO}: cannot resolve its revision: HF_HUB_OFFLINE is set and the cache ({tmp_path / 'hf-home' / 'hub'}) "
            "lacks the revision 'main' (no refs entry): run once with the hub reachable to fill it") in got
    assert hub.requests == []


def test_an_unreachable_hub_is_a_clear_error(tmp_path):
    spec = write_spec(tmp_path, f"{{hf: {REPO}}}")
    got = _refused(spec, hub_env("http://127.0.0.1:9", tmp_path / "hf-home"), tmp_path)
    assert (f"{REPO}: cannot resolve its revision: the hub cannot be reached and the cache "
            f"({tmp_path / 'hf-home' / 'hub'}) lacks the revision 'main' (no refs entry)") in got
