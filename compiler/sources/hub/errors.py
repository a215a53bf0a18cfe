"""What went wrong with the hub, said as the user can act on it: huggingface_hub's exceptions as `SourceError`s.

Every call into huggingface_hub runs inside `translated(...)`. Its exceptions (errors.py of huggingface_hub
2.5; `hf_raise_for_status` turns the hub's `X-Error-Code` into them) become one line naming the repo, the
revision or file, the endpoint, and what to do: an unknown repo (the hub answers 401 to an anonymous request
for a repo it will not show, existing or private, and 404 to an authenticated one), a gated repo without a
token (401) or with one that has not accepted its conditions (403), a token the hub refuses, an unknown
revision, the cache lacking what HF_HUB_OFFLINE needs, and a network that fails. All are unreadable input:
exit 2, and lowering anchors them at the spec's `source` line.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from ...ir import HubRef
from ...util.diagnostics import SourceError


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def token_state() -> str:
    return "HF_TOKEN is set" if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") else \
        "no token: HF_TOKEN is not set"


class HubFailure(SourceError):
    """A `SourceError` from the hub; `cache_lacks`: the hub could not be asked (offline) and the cache lacks
    what the run needs (`check --offline` reports that as a note, not an error); `unresolved`: the repo's
    revision could not be resolved at all (no such repo, or none reachable), so a spec's value that might
    have been a path is said to be neither (spec/lower.py)."""

    def __init__(self, message: str, *, cache_lacks: bool = False, unresolved: bool = False):
        super().__init__(message)
        self.cache_lacks = cache_lacks
        self.unresolved = unresolved


@contextmanager
def translated(hub: HubRef, doing: str, *, file: str | None = None, resolving: bool = False) -> Iterator[None]:
    """Run a huggingface_hub call; its exceptions leave as a `HubFailure` saying what `doing` met (`resolving`:
    the call resolves the revision, and a repo that is not there or not reachable is `unresolved`)."""
    try:
        yield
    except HubFailure:
        raise
    except Exception as error:  # noqa: BLE001  (each known kind is worded below; the rest keep their text)
        from huggingface_hub import errors as hf

        lacks = isinstance(error, (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled, hf.RevisionResolutionError))
        missing = resolving and (lacks or (isinstance(error, hf.RepositoryNotFoundError)
                                           and not isinstance(error, hf.GatedRepoError)))
        raise HubFailure(f"{hub.shown}: {doing}: {_words(error, hub, file)}", cache_lacks=lacks,
                         unresolved=missing) from None


def _words(error: Exception, hub: HubRef, file: str | None) -> str:
    from huggingface_hub import errors as hf

    import httpx2

    status = getattr(getattr(error, "response", None), "status_code", None)
    server_says = getattr(getattr(error, "response", None), "headers", {}).get("X-Error-Message") if status else None
    if isinstance(error, hf.GatedRepoError):
        if status == 403:
            return (f"the repo is gated and the token has no access to it (the hub answered 403: accept the repo's "
                    f"conditions on its page, {endpoint()}/{hub.repo}, with the account of HF_TOKEN)")
        return (f"the repo is gated: the hub wants a token of an account that has accepted its conditions (the hub "
                f"answered {status}; {token_state()})")
    if isinstance(error, hf.RepositoryNotFoundError):
        return (f"no such repo on {endpoint()} (the hub answered {status}: it does not exist, or it is private and "
                f"{'the token has no access' if status == 404 else token_state()})")
    if isinstance(error, hf.RevisionNotFoundError):
        return f"the repo has no revision '{hub.revision}' (a branch, tag or commit; the hub answered {status})"
    if isinstance(error, hf.RemoteEntryNotFoundError):
        return f"the repo has no file {file!r} at this revision (the hub answered {status})"
    if isinstance(error, (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled, hf.RevisionResolutionError)):
        return offline_lack(hub, file)
    if isinstance(error, hf.HfHubHTTPError):
        if status == 401:
            return f"the hub refused the token (401{': ' + server_says if server_says else ''}; {token_state()})"
        return f"the hub at {endpoint()} answered {status}{': ' + server_says if server_says else ''}"
    if isinstance(error, (httpx2.TransportError, ConnectionError, TimeoutError)):
        return f"cannot reach the hub at {endpoint()} ({type(error).__name__}: {error or 'no answer'})"
    return f"{type(error).__name__}: {error}"


def offline_lack(hub: HubRef, what: str | None) -> str:
    """Why an offline run cannot go on: the cache lacks `what` (a file, or the revision itself when None)."""
    from huggingface_hub import constants

    lacks = f"the file {what!r} of that revision" if what else f"the revision '{hub.revision or 'main'}' (no refs entry)"
    reason = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else "the hub cannot be reached"
    return (f"{reason} and the cache ({constants.HF_HUB_CACHE}) lacks {lacks}: run once with the hub "
            "reachable to fill it")
