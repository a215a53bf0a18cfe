"""The README is what a newcomer reads first: short, and one link away from every page of docs/.

Every relative link in the README and in docs/ names a file that exists, and an anchor names a heading of it
(as GitHub makes anchors: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)  # code is not headings
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def relative_links(page: Path) -> list[tuple[str, Path, str]]:
    found = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        found.append((target, (page.parent / path).resolve() if path else page, anchor))
    return found


def test_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8")) <= 10_000


def test_every_page_of_docs_is_one_link_from_the_readme():
    linked = {path for _, path, _ in relative_links(README)}
    assert set((REPO / "docs").glob("*.md")) - linked == set()


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target, path, anchor in relative_links(page):
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Exit codes\n", encoding="utf-8")
    page.write_text("[a](other.md#exit-codes) [b](missing.md) [c](other.md#signals)\n", encoding="utf-8")
    links = relative_links(page)
    assert [(t, p.exists(), p.exists() and a in anchors(p)) for t, p, a in links] == [
        ("other.md#exit-codes", True, True), ("missing.md", False, False), ("other.md#signals", True, False)]
