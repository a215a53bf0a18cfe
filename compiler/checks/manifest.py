"""A package held to its `manifest.json` (`mtpc.emit.manifest`): every file it lists is there, as long as it was
written and with the same sha256. A file the manifest does not list is not looked for, so a package written
without a tokenizer (its checkpoint shipped none) has none to miss, while one whose tokenizer was deleted
since is a finding. Packages from before the manifest have none, and are checked as before.

Hashing reads every listed file once, a megabyte at a time (about as long as copying the package).
It runs after the other checks, so a missing file they explain is said once, in their words.
"""

from __future__ import annotations

import hashlib

from ..emit.manifest import MANIFEST_NAME, records_of
from .package import Checker

_SHORT = 12  # hex digits of a sha256 shown in a finding


def check_manifest(c: Checker, schema: str) -> None:
    if MANIFEST_NAME not in c.files:
        return
    document = c.parse(MANIFEST_NAME)
    if document is None:
        return
    c.validate(MANIFEST_NAME, document, schema)
    records = records_of(document)
    if records is None:  # the schema's findings say why
        return
    for name, record in sorted(records.items()):
        found = c.files.get(name)
        if found is None:
            _missing(c, name, f"is missing: {MANIFEST_NAME} lists it ({record.bytes} bytes), so the package was written with it")
            continue
        size = found.size()
        if size is not None and size != record.bytes:
            how = "truncated or changed since it was written" if size < record.bytes else "changed since it was written"
            c.add(name, "", f"has {size} bytes, {MANIFEST_NAME} records {record.bytes}: {how}")
            continue
        digest = hashlib.sha256()
        for chunk in found.chunks():
            digest.update(chunk)
        if digest.hexdigest() != record.sha256:
            c.add(name, "", f"has been altered since it was written: its sha256 is {digest.hexdigest()[:_SHORT]}…, "
                            f"{MANIFEST_NAME} records {record.sha256[:_SHORT]}…")


def _missing(c: Checker, name: str, message: str) -> None:
    """A listed file that is not there fails the check, said once: where another check has already said why the
    package needs it (an error), that finding stands; where it said so only as a warning (a package may have
    no tokenizer), the manifest's error takes its place, since this package was written with it."""
    said = [f for f in c.findings if f.file == name and not f.pointer and f.message.startswith("is missing")]
    if any(f.blocking for f in said):
        return
    c.findings = [f for f in c.findings if f not in said]
    c.add(name, "", message)
