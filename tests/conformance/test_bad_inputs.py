"""A corpus of broken releases made from each family's own source names: every tensor of its first two layers,
its globals and its head (experts: the first), once left out and once given an extra row. `mtpc inspect`
must refuse each (exit 1: a finding; 2: unreadable input) with a message that names the tensor's owner
(layer and module, or the tensor itself), whatever name the family's source gives it. The same over
llama.cpp's f32 GGUF of the release, by GGUF names, but for what a GGUF may leave out by design.
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
    # The later chained MTP layers are read and left out (`mtp_chained_layers`), Step's and MiMo's alike.
    return [n for n in names if not re.search(r"\.experts\.[1-9]\d*\.|\.mtp\.layers\.[1-9]", n)]


def _owner(hf_name: str) -> str:
    """What a message about `hf_name` must name: its layer and module (`layers.0.linear_attn.`), or the tensor."""
    name = _TEXT.sub("", hf_name)
    m = _LAYER.match(name)
    if m is None:
        return name
    return m[1] + m[2].split(".")[0] + "." if "." in m[2] else m[1]


# Qwen3-Next's head ratio changes no name: one of its two entries is enough.
# A family may say the corpus adds nothing for it (`unsupported["bad inputs"]`, with the reason).
_CORPUS = [f for f in sorted(FAMILIES) if f != "qwen3next-r1" and family(f).supports("bad inputs")]
CASES = [(f, n, how) for f in _CORPUS for n in _corpus(f) for how in ("missing", "extra row")]


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


# What a GGUF may leave out by design, and why (not a broken file): mtpc reads it as llama.cpp does.
GGUF_OPTIONAL = {
    "output.weight": "the LM head is then the embedding (tied)",
    "nextn.shared_head_norm.weight": "the trunk's final norm stands in, with a note",
}
# A wider embedding widens the vocabulary: the LM head is then the tensor of the wrong shape, and is named.
GGUF_NAMED_INSTEAD = {"token_embd.weight": "output.weight"}


def _gguf_corpus(path, num_layers: int) -> list[str]:
    from gguf import GGUFReader

    keep = re.compile(rf"^blk\.(0|1|{num_layers})\.|^(?!blk\.)")
    return [t.name for t in GGUFReader(path).tensors if keep.search(t.name)]


@pytest.mark.parametrize("how", ["missing", "extra row"])
@pytest.mark.parametrize("name", [n for n in _CORPUS if family(n).supports("llama.cpp converter")])
def test_a_broken_gguf_tensor_is_refused_naming_it(ggufs, tmp_path, name, how):
    """The same corpus over llama.cpp's f32 GGUF of the release: every tensor of blocks 0, 1 and the head block, and
    the file's globals, left out or given an extra row; `inspect` refuses each naming the GGUF tensor."""
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    from mtpc.sources.gguf.layout import ARCHITECTURES

    source = ggufs[name]["f32"]
    table = next(names for names in ARCHITECTURES.values() if names.family == family(name).arch.family)
    flags = {t for _, t in table.flag_tensors}
    unrefused = []
    for i, tensor in enumerate(_gguf_corpus(source, family(name).arch.num_layers)):
        options = ({"omit": (tensor,)} if how == "missing"
                   else {"edit": {tensor: lambda w: np.concatenate([w, w[:1]])}})
        path = requantize(source, tmp_path / f"case-{i}.gguf", (), QT.F32, **options)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["inspect", str(path)])
        said = out.getvalue() + err.getvalue()
        if how == "missing" and (tensor in GGUF_OPTIONAL or tensor.split(".", 2)[-1] in GGUF_OPTIONAL):
            continue
        # A tensor whose presence in block 0 tells a fact no key states (GLM's q/k/v biases, qk-norm): left out
        # there, the file contradicts itself further on, and that is what is named.
        flag = how == "missing" and tensor in flags
        named = GGUF_NAMED_INSTEAD.get(tensor, tensor) if how == "extra row" else tensor
        if code not in (1, 2) or (named not in said and not flag):
            unrefused.append((tensor, code, said.strip().splitlines()[-1:]))
        path.unlink()
    assert not unrefused, unrefused
