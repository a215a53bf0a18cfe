"""Files known by their document, their text made on demand (`mtpc.emit.artifact.from_document`)."""

from __future__ import annotations

import json

import pytest

from mtpc.emit.artifact import from_document
from mtpc.util.diagnostics import ExitCode, MtpcError


def test_the_text_is_made_once_when_read_and_the_document_stays_with_it():
    rendered = []
    doc = {"b": [1, 2.5, True], "a": "x"}
    art = from_document("f.json", doc, lambda d: rendered.append(1) or json.dumps(d).encode(), json.loads)
    assert art.document is doc and art.content is None and art.deferred and rendered == []
    assert art.read() == art.read() == json.dumps(doc).encode()
    assert rendered == [1]
    made = art.made()
    assert made.content == json.dumps(doc).encode() and made.document is doc and not made.deferred


def test_a_copy_with_other_bytes_does_not_inherit_the_document():
    import dataclasses

    art = from_document("f.json", {"a": 1}, lambda d: json.dumps(d).encode(), json.loads)
    assert dataclasses.replace(art, content=b'{"a": 2}').document is None
    assert dataclasses.replace(art, chunks=lambda: iter([b'{"a": 2}'])).document is None


@pytest.mark.parametrize("text", [b'{"a": 2}', b'{"a": true}', b"[]"])
def test_a_text_that_reads_back_as_another_document_is_a_bug_in_mtpc(text):
    art = from_document("f.json", {"a": 1.5}, lambda d: text, json.loads)
    with pytest.raises(MtpcError) as caught:
        art.read()
    assert caught.value.exit_code is ExitCode.INTERNAL
    assert "f.json does not read back as the document it was rendered from" in caught.value.diagnostics[0].message
