"""The sigmoid-router families (GLM-4.5, Step-3.5, MiMo-V2-Flash) refuse a GGUF whose `expert_gating_func` says
another gating function, naming the key; an absent key is llama.cpp's sigmoid default."""

from __future__ import annotations

import pytest

from mtpc.sources.gguf.routed_experts import SIGMOID_GATING, require_sigmoid_gating
from mtpc.util.diagnostics import SourceError


class _Meta:
    path, arch = "m.gguf", "step35"

    def __init__(self, **fields):
        self.fields = fields

    def get(self, key, default, required=True):
        return self.fields.get(key.format(arch=self.arch), default)


def test_sigmoid_or_absent_is_accepted():
    require_sigmoid_gating(_Meta(), "Step-3.5")
    require_sigmoid_gating(_Meta(**{"step35.expert_gating_func": SIGMOID_GATING}), "Step-3.5")


def test_softmax_gating_is_refused_naming_the_key_and_the_family():
    with pytest.raises(SourceError) as err:
        require_sigmoid_gating(_Meta(**{"step35.expert_gating_func": 1}), "Step-3.5")
    assert str(err.value) == ("error: m.gguf: GGUF metadata key 'step35.expert_gating_func' is 1; "
                              "Step-3.5 routes by sigmoid scores (2)")
