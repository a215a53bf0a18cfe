"""`added(default)`: an IR field added after provenance fingerprints were fixed.

A synthetic source's fingerprint (`emit/provenance_record.py`) hashes its model's dataclasses.
A field marked `added` enters that hash only when it differs from its default, so a model that
does not use what the field describes keeps the fingerprint (and package) it had before.
"""

from __future__ import annotations

from dataclasses import field

OMITTED_AT_DEFAULT = "omitted_at_default"


def added(default):
    return field(default=default, metadata={OMITTED_AT_DEFAULT: True})
