"""FP8 block weights (DeepSeek-V3's `float8_e4m3fn` + `weight_scale_inv`) read as float32 (`sources/hf/fp8.py`).

The checkpoint is written by torch (`tests/fixtures/fp8_blocks.py`) on the GLM-4.5 fixture (the reader
layer is the family's neighbour: every HF family reads through it); what each weight must read as is
torch's own float8 -> float32 cast times its block's scale, compared bit for bit. Blocks of 16 x 24 leave
partial blocks at the edges of the 64- and 96-wide matrices.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from mtpc.ir import SourceRef
from mtpc.sources import describe, open_weights
from mtpc.sources.hf import fp8
from mtpc.sources.hf.safetensors import SafetensorsFile
from mtpc.util.diagnostics import SourceError
from tests.fixtures.fp8_blocks import write_fp8_checkpoint
from tests.fixtures.glm4moe_checkpoints import fitted_glm_tensors, tiny_glm_arch, write_glm_checkpoint

BLOCK = (16, 24)
ARCH = tiny_glm_arch()


def projection(name: str, value: np.ndarray) -> bool:
    """The weights DeepSeek-V3 stores as FP8: linear projections (the router's gate and embeddings stay float)."""
    return value.ndim == 2 and name.endswith("_proj.weight")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = write_glm_checkpoint(tmp_path_factory.mktemp("fp8"), ARCH)
    meant = write_fp8_checkpoint(directory, fitted_glm_tensors(ARCH), BLOCK, projection)
    return directory, meant


def ref(directory) -> SourceRef:
    return SourceRef("hf", str(directory))


def test_fp8_weights_read_as_torch_dequantizes_them(checkpoint):
    directory, meant = checkpoint
    store = open_weights(ref(directory), describe(ref(directory)))
    assert sum(projection(n, v) for n, v in meant.items()) > 20
    checked = 0
    for hf_name, value in meant.items():
        canonical = _canonical(hf_name)
        if canonical is not None and ".mlp.experts." not in hf_name:
            np.testing.assert_array_equal(np.asarray(store.read(canonical)), value, err_msg=hf_name)
            checked += 1
    assert checked > 15
    # stacked experts: each expert dequantized with its own scales
    for proj in ("gate_proj", "up_proj", "down_proj"):
        stacked = store.read_experts(f"layers.1.mlp.experts.{proj}.weight", 0, ARCH.moe.num_experts)
        for e in range(ARCH.moe.num_experts):
            np.testing.assert_array_equal(stacked[e], meant[f"model.layers.1.mlp.experts.{e}.{proj}.weight"])


def _canonical(hf_name: str) -> str | None:
    """The GLM reader's canonical name of a trunk tensor (the head's are the trailing layer's)."""
    if hf_name == "lm_head.weight":
        return hf_name
    name = hf_name.removeprefix("model.")
    if name.startswith(f"layers.{ARCH.num_layers}."):
        return None
    return name.replace("mlp.shared_experts.", "mlp.shared_expert.")


def test_the_quantization_is_lossy_so_the_test_can_fail(checkpoint):
    """The recovered weights are the checkpoint's, not the float weights it was made from."""
    directory, meant = checkpoint
    original = fitted_glm_tensors(ARCH)["model.layers.0.self_attn.q_proj.weight"]
    assert not np.array_equal(meant["model.layers.0.self_attn.q_proj.weight"], original)


def test_describe_reads_headers_only(checkpoint, monkeypatch):
    directory, meant = checkpoint

    def no_bytes(*args, **kwargs):
        raise AssertionError("describe read tensor data")

    monkeypatch.setattr(SafetensorsFile, "_stored", no_bytes)
    monkeypatch.setattr(fp8, "dequantize", no_bytes)
    info = describe(ref(directory))
    tensors = {t.name: t for t in info.tensors}
    assert tensors["layers.0.self_attn.q_proj.weight"].encoding == "float32"
    assert not any(n.endswith("_scale_inv") for n in tensors)  # consumed, not unknown tensors
    assert dict(info.storage)["self_attn.q_proj.weight"] == "F8_E4M3"
    assert dict(info.storage)["mlp.gate.weight"] == "F32"
    assert info.has_mtp_head  # the head's FP8 tensors and scales make no unknown head tensor


def _rewritten(tmp_path, checkpoint, edit_tensors=None, edit_config=None):
    directory, _ = checkpoint
    target = tmp_path / "edited"
    target.mkdir()
    tensors = load_file(str(directory / "model.safetensors"))
    if edit_tensors:
        edit_tensors(tensors)
    save_file(tensors, str(target / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    if edit_config:
        edit_config(config)
    (target / "config.json").write_text(json.dumps(config))
    return target


SCALE = "model.layers.0.self_attn.q_proj.weight_scale_inv"


@pytest.mark.parametrize("edit_tensors, edit_config, message", [
    (lambda t: t.pop(SCALE), None,
     r"model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' is F8_E4M3 without its block scales "
     r"'model.layers.0.self_attn.q_proj.weight_scale_inv'"),
    (lambda t: t.__setitem__(SCALE, t[SCALE][:, :1].contiguous()), None,
     r"tensor 'model.layers.0.self_attn.q_proj.weight_scale_inv' has shape \[8, 1\]; "
     r"'model.layers.0.self_attn.q_proj.weight' \[128, 64\] in 16x24 blocks needs \[8, 3\]"),
    (lambda t: t.__setitem__(SCALE, t[SCALE].to(__import__("torch").int32)), None,
     r"'model.layers.0.self_attn.q_proj.weight_scale_inv' has dtype I32; block scales must be F32, BF16, F16"),
    (None, lambda c: c.pop("quantization_config"),
     r"tensor 'model.layers.0.mlp.down_proj.weight' is F8_E4M3, but .*config.json has no quantization_config"),
    (None, lambda c: c["quantization_config"].__setitem__("weight_block_size", [128]),
     r"config.json: field quantization_config.weight_block_size must be two positive integers"),
    (None, lambda c: c["quantization_config"].__setitem__("quant_method", "bitsandbytes"),
     r"config.json: field quantization_config.quant_method is 'bitsandbytes'; FP8 block weights need 'fp8'"),
])
def test_bad_fp8_checkpoints_are_refused_naming_the_field(tmp_path, checkpoint, edit_tensors, edit_config, message):
    target = _rewritten(tmp_path, checkpoint, edit_tensors, edit_config)
    with pytest.raises(SourceError, match=message):
        describe(ref(target))


def test_e4m3fn_table_is_torchs():
    import torch

    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32).numpy()
    np.testing.assert_array_equal(fp8.e4m3fn_values(), every)  # NaN == NaN in assert_array_equal
