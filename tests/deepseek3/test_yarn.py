"""YaRN RoPE (DeepSeek-V3) read, tabled and applied as transformers does: its own `_compute_yarn_parameters`,
`DeepseekV3RotaryEmbedding` and `yarn_apply_mscale` are the oracle for the reader (`sources/hf/yarn.py`),
the graphs' frequency table (`graphs/rope_frequencies.py`, `blocks.rotary` on onnxruntime) and the numpy
reference's rope (`reference/yarn.py`)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx_ir as oir
import onnxruntime as ort
import pytest
import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_ds3

from mtpc.graphs.blocks import rotary
from mtpc.graphs.builder import GraphBuilder, OPSETS, IR_VERSION
from mtpc.graphs.rope_frequencies import inverse_frequencies
from mtpc.ir import Rope
from mtpc.reference.primitives import rope as reference_rope
from mtpc.reference.yarn import inverse_frequencies as reference_frequencies
from mtpc.sources.hf.config import Config
from mtpc.sources.hf.yarn import read_yarn
from mtpc.util.diagnostics import SourceError
from tests.deepseek3.yarn_cases import CASES, config_json, transformers_config

# Moderate positions: float32 angles past a few thousand radians round differently on each side (one ulp
# of a frequency moves the angle by position x 1e-7), which says nothing of YaRN; the frequencies
# themselves are compared to transformers' to float32 precision.
POSITIONS = np.array([[0, 1, 2, 7, 100, 511]], np.int64)


def mtpc_rope(name: str) -> tuple[Rope, float]:
    doc = config_json(name)
    yarn, softmax = read_yarn(Config(Path("config.json"), doc), "rope_scaling", doc["rope_scaling"])
    return Rope(doc["rope_theta"], 1.0, doc["qk_rope_head_dim"], position_rows=False, yarn=yarn), softmax


@pytest.mark.parametrize("name", CASES)
def test_reader_factors_are_transformers(name):
    rope, softmax = mtpc_rope(name)
    config = transformers_config(name)
    _, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    assert rope.yarn.attention_factor == pytest.approx(attention_factor, rel=1e-12)
    qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
    expected = hf_ds3.yarn_apply_mscale(config.rope_parameters, qk_head_dim**-0.5)
    assert qk_head_dim**-0.5 * softmax == pytest.approx(expected, rel=1e-12)


def test_the_pair_differs_from_one():
    """The non-1 pair really exercises both factors (a case where both are 1 could hide a swap)."""
    rope, softmax = mtpc_rope("mscale_pair")
    assert abs(rope.yarn.attention_factor - 1) > 0.05 and abs(softmax - 1) > 0.05
    assert mtpc_rope("deepseek_v3")[1] == pytest.approx((0.1 * math.log(40) + 1) ** 2)


@pytest.mark.parametrize("name", CASES)
def test_frequencies_are_transformers(name):
    expected, _ = ROPE_INIT_FUNCTIONS["yarn"](transformers_config(name), "cpu")
    rope, _ = mtpc_rope(name)
    np.testing.assert_allclose(inverse_frequencies(rope), expected.numpy(), rtol=2e-7)
    np.testing.assert_allclose(reference_frequencies(rope.rotary_dim, rope.theta, rope.yarn), expected.numpy(),
                               rtol=2e-7)
    plain = reference_frequencies(rope.rotary_dim, rope.theta, None)
    assert not np.allclose(plain, expected.numpy(), rtol=1e-3)  # yarn changed some frequency


def transformers_tables(name: str) -> tuple[np.ndarray, np.ndarray]:
    """transformers' cos, sin `[1, S, rope_dim]` (each frequency twice, half-split) at POSITIONS."""
    rotary_embedding = hf_ds3.DeepseekV3RotaryEmbedding(transformers_config(name))
    x = torch.zeros(1, POSITIONS.shape[1], 4)
    cos, sin = rotary_embedding(x, torch.from_numpy(POSITIONS))
    return cos.numpy(), sin.numpy()


def graph_tables(rope: Rope) -> tuple[np.ndarray, np.ndarray]:
    """`blocks.rotary`'s cos, sin `[1, S, 1, rope_dim / 2]`, run on onnxruntime."""
    params = SimpleNamespace(io_dtype=oir.DataType.FLOAT)
    b = GraphBuilder("rotary", params, SimpleNamespace(own=None))  # type: ignore[arg-type]
    positions = oir.Value(name="position_ids", type=oir.TensorType(oir.DataType.INT64),
                          shape=oir.Shape([1, POSITIONS.shape[1]]))
    rot = rotary(b, rope, positions, position_rows=False)
    rot.cos.name, rot.sin.name = "cos", "sin"
    graph = oir.Graph([positions], [rot.cos, rot.sin], nodes=b.tape.nodes, initializers=list(b._initializers.values()),
                      opset_imports=dict(OPSETS), name="rotary")
    proto = oir.serde.serialize_model(oir.Model(graph, ir_version=IR_VERSION))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    cos, sin = session.run(None, {"position_ids": POSITIONS})
    return cos, sin


@pytest.mark.parametrize("name", CASES)
def test_graph_tables_are_transformers(name):
    rope, _ = mtpc_rope(name)
    cos, sin = graph_tables(rope)
    hf_cos, hf_sin = transformers_tables(name)
    half = rope.rotary_dim // 2
    np.testing.assert_allclose(cos[:, :, 0, :], hf_cos[..., :half], atol=1e-4)
    np.testing.assert_allclose(sin[:, :, 0, :], hf_sin[..., :half], atol=1e-4)
    np.testing.assert_allclose(hf_cos[..., half:], hf_cos[..., :half])  # half-split: each frequency twice


@pytest.mark.parametrize("name", CASES)
def test_reference_rope_is_transformers(name):
    """The numpy reference's rotation of q / k equals transformers' `apply_rotary_pos_emb` (half-split form)."""
    rope, _ = mtpc_rope(name)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, POSITIONS.shape[1], 2, rope.rotary_dim))
    ours = reference_rope(x, POSITIONS, rope.rotary_dim, rope.theta, rope.yarn)
    cos, sin = (torch.from_numpy(t).double() for t in transformers_tables(name))
    q = torch.from_numpy(x).transpose(1, 2)  # [B, heads, S, D]
    theirs, _ = hf_ds3.apply_rotary_pos_emb(q, q, cos, sin)
    np.testing.assert_allclose(ours, theirs.transpose(1, 2).numpy(), atol=1e-4)
    plain = reference_rope(x, POSITIONS, rope.rotary_dim, rope.theta)
    assert not np.allclose(plain, ours, atol=1e-2)


def test_reader_refuses_what_transformers_cannot_read(tmp_path):
    doc = config_json("deepseek_v3")
    del doc["rope_scaling"]["factor"]
    with pytest.raises(SourceError, match=r"config.json: field rope_scaling.factor is missing \(required for yarn\)"):
        read_yarn(Config(Path("config.json"), doc), "rope_scaling", doc["rope_scaling"])
    doc = config_json("no_mscale")
    doc["rope_scaling"]["original_max_position_embeddings"] = "4k"
    with pytest.raises(SourceError, match=r"field rope_scaling.original_max_position_embeddings must be a positive"):
        read_yarn(Config(Path("config.json"), doc), "rope_scaling", doc["rope_scaling"])
