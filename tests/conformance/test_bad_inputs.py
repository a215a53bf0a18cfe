"""A corpus of broken releases made from each family's own source names: every tensor of its first two layers,
its globals and its head (experts: the first), once left out and once given an extra row. `mtpc inspect`
must refuse each (exit 1: a finding; 2: unreadable input) with a message that names the tensor's owner
(layer and module, or the tensor itself), whatever name the family's source gives it.
"""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from mtpc.cli.main import main

from .families import FAMILIES, family

_TEXT = re.compile(r"^model\.(?:language_model\.)?")  # the text model's prefix (Qwen3.5's multimodal export nests it)
_LAYER = re.compile(r"^((?:mtp\.)?layers\.\d+\.)(.*)$")


def _corpus(name: str) -> list[str]:
    keep = re.compile(r"(^|\.)layers\.[01]\.|^mtp\.|^(?!.*layers\.)")
    head = f"layers.{family(name).arch.num_layers}."
    names = [n for n in family(name).tensors() if keep.search(n) or head in n]
    return [n for n in names if not re.search(r"\.experts\.[1-9]\d*\.", n)]


def _owner(hf_name: str) -> str:
    """What a message about `hf_name` must name: its layer and module (`layers.0.linear_attn.`), or the tensor."""
    name = _TEXT.sub("", hf_name)
    m = _LAYER.match(name)
    if m is None:
        return name
    return m[1] + m[2].split(".")[0] + "." if "." in m[2] else m[1]


# Qwen3-Next's head ratio changes no name: one of its two entries is enough.
CASES = [(f, n, how) for f in sorted(FAMILIES) if f != "qwen3next-r1" for n in _corpus(f) for how in ("missing", "extra row")]


@pytest.mark.parametrize("name, tensor, how", CASES, ids=[f"{f}-{n}-{h}" for f, n, h in CASES])
def test_a_broken_tensor_is_refused_naming_it(tmp_path, name, tensor, how):
    fam = family(name)
    tensors = dict(fam.tensors())
    if how == "missing":
        del tensors[tensor]
    else:
        tensors[tensor] = np.concatenate([tensors[tensor], tensors[tensor][:1]])
    folder = fam.write(tmp_path / "release", tensors)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["inspect", str(folder)])
    said = out.getvalue() + err.getvalue()
    assert code in (1, 2), said
    assert _owner(tensor) in said, (_owner(tensor), said)
