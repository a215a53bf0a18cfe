"""Issue 7's acceptance grid: a GGUF's quantized embedding or LM head never gives a package `check` rejects.

For every storage type of `token_embd` / `output` (Q4_0, Q8_0, F32), every quantization recipe
(float; the int4 recipe in the comments of specs/qwen35-tiny-mtp.yaml; `keep: source`) and every
target set (onnxruntime_genai, onnx_genai, both), `compile` either refuses the spec with a
positioned error at the quantization field to change (and the fix its hint names then builds),
or builds a package that `mtpc check` passes and the upstream onnx-genai schemas accept.

Which of the two is predicted here from what onnx-genai accepts (shared/reference/
inference-metadata.md §4.5), not from mtpc: its MTP sidecar borrows the target's embedding
only as a dense float table, so a spec that stores a quantized `token_embd` quantized
(kept, or re-quantized to int4) with an onnx_genai target is refused; a quantized LM head
is borrowable (native backend), so everything else builds.

Every cell compiles in memory; packages are written only for the cells whose borrowed LM head
is packed, to run `mtpc check` on disk and onnx-genai's own projection of that LM head.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader
from gguf.quants import dequantize
from onnx import TensorProto, helper

from mtpc.checks import artifact_files, check_files
from mtpc.cli.main import main
from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.pipeline.driver import build
from mtpc.schema.validation import read_yaml
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.shared import shared_file

STORAGE = {"Q4_0": QT.Q4_0, "Q8_0": QT.Q8_0, "F32": QT.F32}
RECIPES = {
    "float": "  default: {bits: null}\n",
    # The int4 recipe of specs/qwen35-tiny-mtp.yaml's comments.
    "int4": "  default: {bits: 4, block_size: 32}\n  overrides:\n"
    "    - {match: lm_head.weight, bits: null}\n    - {match: mtp.fc.weight, bits: null}\n",
    "keep": "  default: {keep: source}\n",
}
TARGETS = {
    "onnxruntime_genai": ("onnxruntime_genai",),
    "onnx_genai": ("onnx_genai",),
    "both": ("onnxruntime_genai", "onnx_genai"),
}
# The spec field each recipe stores a quantized embedding with, as the refusal must point at it.
REFUSED_AT = {"int4": "4", "keep": "source"}
EMBEDDING_FIX = "{match: embed_tokens.weight, bits: null}"
HIDDEN = tiny_arch().hidden_size


def _refused(embedding: str, recipe: str, targets: str) -> bool:
    """onnx-genai borrows only a dense float embedding; a quantized token_embd stays quantized under
    `keep: source` and is re-quantized to int4 by the int4 recipe."""
    return "onnx_genai" in TARGETS[targets] and embedding != "F32" and recipe in REFUSED_AT


def _lm_head_packed(output: str, recipe: str) -> bool:
    """Only `keep: source` keeps a quantized output.weight quantized (the int4 recipe floats the LM head)."""
    return recipe == "keep" and output != "F32"


# token_embd and output stored alike, under every recipe and target set (27 cells); then each stored
# quantized beside a float other, where only one of the two decides (kept from the source, both targets).
CELLS = [
    pytest.param(s, s, r, t, id=f"{s}-{r}-{t}") for s, r, t in itertools.product(STORAGE, RECIPES, TARGETS)
] + [
    pytest.param(e, o, "keep", "both", id=f"embd-{e}-output-{o}-keep-both")
    for e, o in (("F32", "Q4_0"), ("F32", "Q8_0"), ("Q4_0", "F32"), ("Q8_0", "F32"))
]


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grid-gguf")
    made: dict[tuple[str, str], Path] = {}

    def get(embedding: str, output: str) -> Path:
        if (embedding, output) not in made:
            types = (("token_embd.weight", STORAGE[embedding]), ("output.weight", STORAGE[output]))
            # With a tokenizer: onnx-genai refuses a package without tokenizer.json.
            made[embedding, output] = write_gguf(folder / f"{embedding}-{output}.gguf", tiny_arch(), types=types,
                                                 tokenizer=True)
        return made[embedding, output]

    return get


def _spec(folder: Path, gguf: Path, recipe: str, targets: str, *, prepend_override: str | None = None) -> Path:
    quantization = RECIPES[recipe]
    if prepend_override is not None:
        lines = quantization.splitlines(keepends=True)
        quantization = lines[0] + "  overrides:\n" + f"    - {prepend_override}\n" + "".join(lines[2:])
    target_lines = "".join(f"  {t}: {{}}\n" for t in TARGETS[targets])
    path = folder / "spec.yaml"
    path.write_text(
        f"mtpc: 1\nname: grid\nsource:\n  gguf: {gguf}\nquantization:\n{quantization}targets:\n{target_lines}",
        encoding="utf-8",
    )
    return path


def _upstream_schema(name: str) -> dict:
    return json.loads(shared_file(f"conformance/onnx-genai/{name}").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def upstream():
    flat = _upstream_schema("flat-layout.schema.json")
    speculator = {"$schema": flat["$schema"], "$ref": "#/$defs/SpeculatorConfig", "$defs": flat["$defs"]}
    return {
        "inference_metadata.yaml": jsonschema.Draft202012Validator(_upstream_schema("workflow-layout.schema.json")),
        "speculator_config": jsonschema.Draft202012Validator(speculator),
    }


def _assert_sound(artifacts, upstream) -> dict[str, object]:
    """`mtpc check`'s findings are none and upstream onnx-genai's schemas accept its documents; the parsed documents."""
    assert [f.render() for f in check_files(artifact_files(artifacts)) if f.blocking] == []
    files = {a.relpath: a for a in artifacts}
    docs: dict[str, object] = {}
    if "inference_metadata.yaml" in files:
        docs["inference_metadata.yaml"] = read_yaml(files["inference_metadata.yaml"].read().decode("utf-8"))
        upstream["inference_metadata.yaml"].validate(docs["inference_metadata.yaml"])
    if "config.json" in files:
        docs["config.json"] = json.loads(files["config.json"].read())
        upstream["speculator_config"].validate(docs["config.json"]["speculator_config"])
    return docs


@pytest.mark.parametrize("embedding, output, recipe, targets", CELLS)
def test_compile_refuses_at_the_field_to_change_or_writes_a_package_check_passes(
    tmp_path, gguf_file, upstream, embedding, output, recipe, targets
):
    spec = _spec(tmp_path, gguf_file(embedding, output), recipe, targets)
    if _refused(embedding, recipe, targets):
        with pytest.raises(MtpcError) as caught:
            build(spec)
        err = caught.value
        assert err.exit_code is ExitCode.FINDINGS
        (diag,) = err.diagnostics
        span = diag.span
        assert span is not None and span.file == str(spec)
        line = spec.read_text(encoding="utf-8").splitlines()[span.line - 1]
        assert line.startswith("  default:") and line[span.col - 1 : span.end_col - 1] == REFUSED_AT[recipe]
        assert "embed_tokens.weight" in diag.message and f"the source's {embedding}" in diag.message
        assert EMBEDDING_FIX in diag.hint
        # The fix the hint names is all it takes.
        spec = _spec(tmp_path, gguf_file(embedding, output), recipe, targets, prepend_override=EMBEDDING_FIX)
    with build(spec) as built:
        docs = _assert_sound(built.artifacts, upstream)
        notes = built.ir.notes
    packed = _lm_head_packed(output, recipe)
    borrowed = "onnx_genai" in TARGETS[targets]
    assert bool([n for n in notes if "borrows the" in n and "LM head" in n]) == (packed and borrowed)
    if borrowed:
        block = docs["config.json"]["speculator_config"]
        assert block["embedding"]["name"] == "model.embed_tokens.weight"
        assert block["lm_head"]["name"] == "lm_head.MatMul.weight"


# ----------------------------------------------------------------------------- written packages


PACKED_CELLS = [
    pytest.param(o, t, id=f"output-{o}-{t}") for o in ("Q4_0", "Q8_0") for t in ("onnx_genai", "both")
]


@pytest.mark.parametrize("output, targets", PACKED_CELLS)
def test_a_packed_lm_head_package_passes_check_on_disk_and_projects_as_onnx_genai_would(
    tmp_path, gguf_file, capsys, output, targets
):
    gguf = gguf_file("F32", output)
    spec = _spec(tmp_path, gguf, "keep", targets)
    package = tmp_path / "pkg"
    assert main(["compile", "-q", str(spec), "-o", str(package)]) == 0
    assert "native backend only" in capsys.readouterr().out
    assert main(["check", str(package)]) == 0

    # onnx-genai's native loader, transcribed: the packed weight by the declared name, its scales as
    # `<prefix>.scales`, block size = hidden / blocks per row, bits = blob * 8 / block size, then one
    # MatMulNBits of its own. Its logits must be the GGUF's output.weight times the hidden state.
    name = json.loads((package / "config.json").read_text())["speculator_config"]["lm_head"]["name"]
    model = onnx.load(str(package / "model.onnx"))  # with its external data
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    weight, scales = inits[name], inits[name.rsplit(".", 1)[0] + ".scales"]
    assert name.rsplit(".", 1)[0] + ".zero_points" not in inits  # Q4_0 / Q8_0: the op's default zero point
    n, k_blocks, blob = weight.shape
    block_size = HIDDEN // k_blocks
    bits = blob * 8 // block_size
    assert (bits, block_size) == ({"Q4_0": 4, "Q8_0": 8}[output], 32)
    hidden = np.random.default_rng(0).standard_normal((1, HIDDEN)).astype(np.float32)
    logits = _matmul_nbits(hidden, weight, scales.astype(np.float32), n, bits, block_size)

    tensor = next(t for t in GGUFReader(str(gguf)).tensors if t.name == "output.weight")
    expected = hidden @ dequantize(tensor.data, tensor.tensor_type).reshape(n, HIDDEN).T
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


def _matmul_nbits(x: np.ndarray, weight: np.ndarray, scales: np.ndarray, n: int, bits: int, block_size: int) -> np.ndarray:
    graph = helper.make_graph(
        [helper.make_node("MatMulNBits", ["x", "w", "s"], ["y"], domain="com.microsoft",
                          K=x.shape[1], N=n, bits=bits, block_size=block_size)],
        "draft_lm_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.shape[0], n])],
        initializer=[onnx.numpy_helper.from_array(weight, "w"), onnx.numpy_helper.from_array(scales, "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_refused_cell_writes_nothing_and_says_where(tmp_path, gguf_file, capsys):
    spec = _spec(tmp_path, gguf_file("Q4_0", "Q4_0"), "keep", "both")
    out = tmp_path / "pkg"
    assert main(["compile", str(spec), "-o", str(out)]) == int(ExitCode.FINDINGS)
    assert not out.exists()
    text = capsys.readouterr().err
    assert f"{spec}:6:" in text and "error: quantization.default stores embed_tokens.weight quantized" in text
    assert EMBEDDING_FIX in text
