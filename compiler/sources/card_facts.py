"""What a checkpoint says about itself that a model card repeats: its Hugging Face repo and license.

Only facts the source states are taken; nothing is guessed from names. A GGUF file
names the repo it was converted from (`general.source.repo_url`, or `general.repo_url`,
when it is a huggingface.co address) and its license (`general.license`). A Hugging
Face folder names its repo when it sits in the hub cache (`models--ORG--NAME/snapshots/REV`)
or when its config.json carries an `_name_or_path` of the form ORG/NAME, and its license in
the front matter of its own README.md. The source's own `base_model` is not ours: that is
the model the source was made from, one generation further back.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

CardFacts = tuple[tuple[str, str], ...]

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_HF_URL = re.compile(r"https?://(?:www\.)?huggingface\.co/(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)/?")
_HUB_CACHE = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)")
_LICENSE = re.compile(r"[A-Za-z0-9][\w.+-]*")
# How much of a source README.md is read for its front matter.
_README_HEAD = 16384


def _facts(base_model: str | None, license: str | None) -> CardFacts:
    out = []
    if base_model and _REPO_ID.fullmatch(base_model):
        out.append(("base_model", base_model))
    if license and _LICENSE.fullmatch(license):
        out.append(("license", license.lower()))
    return tuple(out)


def gguf_card_facts(metadata: Mapping[str, object]) -> CardFacts:
    repo = None
    for key in ("general.source.repo_url", "general.repo_url"):
        m = _HF_URL.fullmatch(str(metadata.get(key) or ""))
        if m:
            repo = m["repo"]
            break
    license = metadata.get("general.license")
    return _facts(repo, license if isinstance(license, str) else None)


def _front_matter_license(readme: Path) -> str | None:
    try:
        with open(readme, encoding="utf-8", errors="replace") as f:
            head = f.read(_README_HEAD)
    except OSError:
        return None
    if not head.startswith("---\n"):
        return None
    end = head.find("\n---", 4)
    if end < 0:
        return None
    import yaml

    try:
        doc = yaml.safe_load(head[4:end])
    except yaml.YAMLError:
        return None
    license = doc.get("license") if isinstance(doc, dict) else None
    return license if isinstance(license, str) else None


def hf_card_facts(directory: Path, config: Mapping[str, object]) -> CardFacts:
    repo = None
    parts = directory.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots":
        m = _HUB_CACHE.fullmatch(parts[-3])
        if m:
            repo = f"{m['org']}/{m['name']}"
    named = config.get("_name_or_path")
    if repo is None and isinstance(named, str) and _REPO_ID.fullmatch(named) and not (directory / named).exists():
        repo = named
    return _facts(repo, _front_matter_license(directory / "README.md"))
