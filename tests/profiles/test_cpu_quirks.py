"""The CPU quirks a profile records, run in the installed onnxruntime-genai release (0.18.0, and
0.17.1 through tests/test_runtime_releases.py): each is why the emitter writes what it writes, so
each is shown failing on the form the emitter avoids.

- `shared_initializer_failing_providers = {"cpu"}`: a CPU package listing `shared_initializers`
  does not load ("GetMemoryInfo for CPU should not be used.").
- `mtp_logits_dtype_by_provider = {"cpu": "float16"}`: with float32 `logits`, plain greedy decoding
  runs but og.MtpGenerator does not ("Cast - input and output types are the same").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import onnxruntime_genai as og
import pytest

from mtpc.output.write import write_package
from mtpc.pipeline.driver import build
from mtpc.profiles import ort_genai_profile
from tests.fixtures.ort_release import INSTALLED, for_installed_release

TINY = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"
PROFILE = ort_genai_profile(INSTALLED)
PROMPT = [5, 17, 42]


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quirks")
    spec = folder / "spec.yaml"
    spec.write_text(for_installed_release(TINY.read_text(encoding="utf-8")), encoding="utf-8")
    write_package(build(spec).artifacts, folder / "pkg")
    return folder / "pkg"


def _copy(package: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    return copy


def _generate(main: og.Model, head: og.Model | None) -> list[int]:
    params = og.GeneratorParams(main)
    params.set_search_options(do_sample=False, max_length=len(PROMPT) + 4)
    generator = og.MtpGenerator(main, head, params) if head is not None else og.Generator(main, params)
    generator.append_tokens(PROMPT)
    while not generator.is_done():
        generator.generate_next_token()
    sequence = generator.get_sequence() if head is not None else generator.get_sequence(0)
    return [int(t) for t in sequence]


def test_the_emitted_cpu_package_runs_greedy_and_mtp(package):
    main, head = og.Model(str(package)), og.Model(str(package / "mtp"))
    assert _generate(main, head) == _generate(main, None)


def test_shared_initializers_do_not_load_on_cpu(package, tmp_path):
    assert not PROFILE.shares_initializers("cpu")
    copy = _copy(package, tmp_path)
    graph = onnx.load(str(copy / "model.onnx"), load_external_data=False).graph
    tensor = next(t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
    where = {e.key: e.value for e in tensor.external_data}
    entry = {"name": tensor.name, "data_file": where["location"], "offset": where.get("offset", "0"),
             "length": where["length"], "data_type": tensor.data_type, "shape": list(tensor.dims)}
    config = json.loads((copy / "genai_config.json").read_text(encoding="utf-8"))
    config["model"]["decoder"]["shared_initializers"] = [entry]
    (copy / "genai_config.json").write_text(json.dumps(config), encoding="utf-8")
    og.Config(str(copy))  # the key itself parses
    with pytest.raises(Exception, match="GetMemoryInfo for CPU should not be used"):
        og.Model(str(copy))


def _float32_logits(graph_path: Path) -> None:
    """The graph without its final Cast: `logits` float32, as the graph computes it."""
    model = onnx.load(str(graph_path), load_external_data=False)
    graph = model.graph
    cast = next(n for n in graph.node if n.op_type == "Cast" and list(n.output) == ["logits"])
    for node in graph.node:
        node.output[:] = ["logits" if name == cast.input[0] else name for name in node.output]
    graph.node.remove(cast)
    output = next(o for o in graph.output if o.name == "logits")
    output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    onnx.save(model, str(graph_path))


def test_float32_logits_decode_greedy_but_not_with_the_mtp_generator(package, tmp_path):
    assert PROFILE.logits_dtype("cpu", "float32", emit_head=True) == "float16"
    copy = _copy(package, tmp_path)
    for graph in ("model.onnx", "mtp/mtp.onnx"):
        _float32_logits(copy / graph)
    main = og.Model(str(copy))
    assert _generate(main, None) == _generate(og.Model(str(package)), None)
    with pytest.raises(Exception, match="Cast - input and output types are the same"):
        _generate(main, og.Model(str(copy / "mtp")))
