"""The onnxruntime-genai 0.18.0 builder's package of the same MoE checkpoint, as an independent cross-check.

The builder (`onnxruntime_genai.models.builder`, Qwen35MoEModel + Qwen35MTPModel with
`is_moe_mtp`) exports the release-layout checkpoint for CPU in float32. Its `genai_config.json`
`model` section and the graphs' inputs and outputs must equal ours except where mtpc differs on
purpose; every intended difference is listed here with its reason, and anything else fails. The
builder's own main graph must also decode as transformers does (with its CPU-fatal shared
initializers left out), so the agreement is with a package that works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.fixtures.fitted_head import PROMPTS
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import compile_moe

# Where our `model` section differs from the builder's, and why (dotted key -> reason).
INTENDED_CONFIG_DIFFERENCES = {
    # A cosmetic log tag; the runtime needs none.
    "decoder.session_options.log_id": "mtpc sets no log id",
    # The builder writes them on CPU too, where 0.18.0 fails to load them ("GetMemoryInfo for CPU
    # should not be used"); the CPU profile leaves them out (profiles/ort_genai_0_18.py).
    "decoder.shared_initializers": "not loadable on the CPU provider",
    "mtp.shared_initializers": "not loadable on the CPU provider",
    # The parser turns a scalar into a one-element list: the same value.
    "eos_token_id": "scalar for a single end token",
    # og.MtpGenerator loads the head as a model of its own folder (mtp/genai_config.json).
    "mtp.filename": "the head lives in mtp/",
}
# Where the graphs' inputs / outputs differ: (graph, tensor) -> reason.
INTENDED_IO_DIFFERENCES = {
    # The KV head size is a fixed 64; the builder leaves it symbolic (`kv_cache_dim`).
    **{(g, f"{d}.{i}.{kv}"): "static head size" for g, layers in (("model", (1, 3)), ("mtp", (0,)))
       for i in layers for d in ("past_key_values", "present") for kv in ("key", "value")},
    # og.MtpGenerator casts logits to float32 and onnxruntime refuses a Cast to the same type on CPU,
    # so the CPU profile emits float16 logits when there is a head (profiles/ort_genai_0_18.py).
    ("model", "logits"): "float16 logits on CPU with a head",
    ("mtp", "logits"): "float16 logits on CPU with a head",
}


def _build(checkpoint: Path, out: Path, cache: Path, *options: str) -> Path:
    command = [
        sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
        "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(cache),
        "--extra_options", "hf_token=false", "exclude_embeds=false", *options,
    ]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out


@pytest.fixture(scope="session")
def builder_package(moe_workdir, moe_release_with_tokenizer) -> Path:
    return _build(moe_release_with_tokenizer, moe_workdir / "builder", moe_workdir / "builder-cache")


@pytest.fixture(scope="session")
def windowed_builder_package(moe_workdir, moe_release_with_tokenizer) -> Path:
    """The builder's export with the state window mtpc's `auto` gives 4 drafts (its CPU kernels cannot run it:
    it sets LinearAttention's `state_window`, which onnxruntime runs on CUDA only), for its I/O."""
    return _build(moe_release_with_tokenizer, moe_workdir / "builder-windowed", moe_workdir / "builder-cache",
                  "state_window=5")


@pytest.fixture(scope="session")
def our_package(moe_workdir, moe_release_with_tokenizer) -> Path:
    return compile_moe(moe_workdir, "moe-vs-builder", f"{{hf: {moe_release_with_tokenizer.name}}}")


def _flat(doc: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _io(path: Path) -> dict[str, tuple]:
    graph = onnx.load(str(path), load_external_data=False).graph
    dims = lambda v: tuple(d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim)  # noqa: E731
    return {v.name: (kind, v.type.tensor_type.elem_type, dims(v))
            for kind, values in (("input", graph.input), ("output", graph.output)) for v in values}


def test_model_section_agrees_but_for_the_listed_differences(builder_package, our_package):
    theirs = _flat(json.loads((builder_package / "genai_config.json").read_text())["model"])
    ours = _flat(json.loads((our_package / "genai_config.json").read_text())["model"])
    # The builder fills these from the tokenizer's chat tokens; our tiny tokenizer has none to name.
    for key in ("bot_token_id", "eot_token_id", "bor_token_id", "eor_token_id"):
        theirs.pop(key, None)
    differing = {key for key in set(theirs) | set(ours) if theirs.get(key) != ours.get(key)}
    assert differing == set(INTENDED_CONFIG_DIFFERENCES), {k: (theirs.get(k), ours.get(k)) for k in differing}
    assert ours["type"] == theirs["type"] == "qwen3_5_moe_text"
    assert theirs["eos_token_id"] == [ours["eos_token_id"]]
    assert theirs["mtp.filename"] == Path(ours["mtp.filename"]).name


def test_graph_io_agrees_but_for_the_listed_differences(windowed_builder_package, our_package):
    """Our windowed main graph's conv / recurrent state I/O is the builder's `state_window=5` export's."""
    differing = set()
    for graph, theirs_path, ours_path in (("model", "model.onnx", "model.onnx"), ("mtp", "mtp.onnx", "mtp/mtp.onnx")):
        theirs, ours = _io(windowed_builder_package / theirs_path), _io(our_package / ours_path)
        assert set(theirs) == set(ours), graph
        differing |= {(graph, name) for name in theirs if theirs[name] != ours[name]}
    assert differing == set(INTENDED_IO_DIFFERENCES)


def test_the_builders_package_decodes_as_transformers(moe_workdir, builder_package, moe_transformers_greedy):
    loadable = Path(shutil.copytree(builder_package, moe_workdir / "builder-cpu-loadable"))
    config = json.loads((loadable / "genai_config.json").read_text())
    config["model"]["decoder"].pop("shared_initializers")
    config["model"].pop("mtp")
    (loadable / "genai_config.json").write_text(json.dumps(config))
    model = decoding.load(loadable)
    for prompt in PROMPTS:
        assert decoding.greedy(model, list(prompt), STEPS) == moe_transformers_greedy[prompt]
