"""The onnx_graphs emitter: artifacts, external data layout, streaming, determinism, contract I/O."""

import hashlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from mtpc.ir.contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from mtpc.emit import EMITTERS
from mtpc.emit.graph_files import emit_graph_files
from mtpc.emit.onnx_graphs import emit_onnx_graphs
from mtpc.ir import GraphContract
from mtpc.sources.random_weights import seeded_store
from mtpc.weights import ArrayWeightStore

from .tiny import ONNX_GENAI_HEAD_FILE, ORT_HEAD_FILE, contract_io, emit, graph_io, make_ir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(arch):
    return seeded_store(arch, 0)


@pytest.fixture(scope="module")
def built(arch, store, tmp_path_factory):
    out = tmp_path_factory.mktemp("emit") / "pkg"
    ir = make_ir(arch)
    messages: list[str] = []
    artifacts, ctx = emit(ir, store, out, messages.append)
    return ir, artifacts, ctx, out, messages


def test_listed_first_among_the_emitters():
    # genai_config reads the data layouts this emitter records, so it must run before.
    names = [name for name, _ in EMITTERS]
    assert dict(EMITTERS)["onnx_graphs"] is emit_graph_files  # which builds them with emit_onnx_graphs (or defers)
    assert names.index("onnx_graphs") < names.index("genai_config")


def test_one_graph_and_one_streamed_data_file_per_graph(built):
    _, artifacts, _, _, _ = built
    assert [a.relpath for a in artifacts] == [
        "model.onnx", "model.onnx.data", ORT_HEAD_FILE, ORT_HEAD_FILE + ".data",
        ONNX_GENAI_HEAD_FILE, ONNX_GENAI_HEAD_FILE + ".data"]
    for art in artifacts:
        streamed = art.relpath.endswith(".data")
        assert (art.content is None) == streamed and (art.chunks is not None) == streamed


@pytest.mark.parametrize("filename", ["model.onnx", ORT_HEAD_FILE, ONNX_GENAI_HEAD_FILE])
def test_graph_io_is_exactly_the_contract(built, filename):
    ir, _, _, out, _ = built
    cfg = ir.main if filename == "model.onnx" else next(c for _, c in ir.heads if c.filename == filename)
    model = onnx.load(out / filename, load_external_data=False)
    assert graph_io(model.graph.input) == contract_io(cfg.contract.inputs)
    assert graph_io(model.graph.output) == contract_io(cfg.contract.outputs)
    onnx.checker.check_model(str(out / filename), full_check=True)


def _external(out: Path, filename: str) -> dict[str, dict[str, str]]:
    model = onnx.load(out / filename, load_external_data=False)
    return {t.name: {e.key: e.value for e in t.external_data}
            for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}


@pytest.mark.parametrize("filename", ["model.onnx", ORT_HEAD_FILE, ONNX_GENAI_HEAD_FILE])
def test_weights_are_external_next_to_the_graph_and_aligned(built, filename):
    _, _, _, out, _ = built
    model = onnx.load(out / filename, load_external_data=False)
    external = _external(out, filename)
    assert len(external) > 10
    # The main model reads the embedding and LM head from the head's file (one copy); everything
    # else, in every graph, sits next to the graph.
    shared = {EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER} if filename == "model.onnx" else set()
    for name, info in external.items():
        expected = "mtp/mtp.onnx.data" if name in shared else Path(filename).name + ".data"
        assert info["location"] == expected, name
        size = (out / Path(filename).parent / info["location"]).stat().st_size
        assert int(info["offset"]) % 64 == 0 and int(info["offset"]) + int(info["length"]) <= size
    inline = [t for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert all(np.prod(t.dims) <= 64 for t in inline)  # only shapes, split sizes, frequency tables


def test_main_and_head_read_one_copy_of_the_embedding_and_lm_head(built, store):
    _, _, ctx, out, _ = built
    main, head = _external(out, "model.onnx"), _external(out, ORT_HEAD_FILE)
    data = (out / (ORT_HEAD_FILE + ".data")).read_bytes()
    expected = {EMBEDDING_INITIALIZER: store.read_float("embed_tokens.weight"),
                LM_HEAD_INITIALIZER: store.read_float("lm_head.weight").T}
    for name, value in expected.items():
        assert (main[name]["offset"], main[name]["length"]) == (head[name]["offset"], head[name]["length"])
        start, length = int(head[name]["offset"]), int(head[name]["length"])
        assert data[start : start + length] == np.ascontiguousarray(value, np.float32).tobytes()
        # Nowhere else in the package: the main data file holds no copy.
        assert np.ascontiguousarray(value, np.float32).tobytes() not in (out / "model.onnx.data").read_bytes()
    assert ctx.shared_data_files == {"model.onnx": ORT_HEAD_FILE + ".data"}


def test_data_layout_points_at_the_shared_tensors(built, store):
    _, _, ctx, out, _ = built
    layouts = ctx.data_layouts
    assert set(layouts) == {"model.onnx.data", ORT_HEAD_FILE + ".data", ONNX_GENAI_HEAD_FILE + ".data"}
    assert layouts[ONNX_GENAI_HEAD_FILE + ".data"] == {}  # the sidecar borrows from the target at run time
    assert layouts["model.onnx.data"] == {}  # the main model reads them from the head's file
    expected = {EMBEDDING_INITIALIZER: store.read_float("embed_tokens.weight"),
                LM_HEAD_INITIALIZER: store.read_float("lm_head.weight").T}
    relpath = ORT_HEAD_FILE + ".data"
    assert set(layouts[relpath]) == set(expected)
    data = (out / relpath).read_bytes()
    for name, value in expected.items():
        stored = layouts[relpath][name]
        assert (stored.data_type, stored.shape) == (onnx.TensorProto.FLOAT, value.shape)
        assert data[stored.offset : stored.offset + stored.length] == np.ascontiguousarray(value, np.float32).tobytes()


def test_no_head_build_has_only_the_main_contract(arch, store):
    ir = make_ir(arch, heads=())
    contract = ir.main.contract
    without_hidden = GraphContract(contract.inputs, tuple(t for t in contract.outputs if t.name != "hidden_states"))
    # As head detection leaves it: neither the role nor the tensor.
    outputs = tuple((role, name) for role, name in ir.main.outputs if role != "hidden_states")
    ir = replace(ir, main=replace(ir.main, outputs=outputs, contract=without_hidden))
    artifacts, _ = emit(ir, store)
    assert [a.relpath for a in artifacts] == ["model.onnx", "model.onnx.data"]
    model = onnx.load_from_string(artifacts[0].content)
    assert [o.name for o in model.graph.output] == [t.name for t in without_hidden.outputs]


@pytest.mark.parametrize("jobs", [1, 2])
def test_weights_are_read_only_while_streaming_a_few_at_a_time(arch, store, jobs):
    """One weight at a time with one job; with N jobs, N more are converted ahead while one is written."""
    class CountingStore(ArrayWeightStore):
        def __init__(self, tensors):
            super().__init__(tensors)
            self.reads: list[str] = []

        def read(self, name):
            self.reads.append(name)
            return super().read(name)

        def read_float(self, name):
            self.reads.append(name)
            return super().read_float(name)

    counting = CountingStore({n: store.read(n) for n in store.names()})
    artifacts, ctx = emit(make_ir(arch), counting)
    ctx.jobs = jobs
    assert counting.reads == []
    chunks = artifacts[1].chunks()
    next(chunks)
    ahead = len(counting.reads)
    rest = b"".join(chunks)
    assert len(rest) > 0 and len(counting.reads) == len(set(counting.reads))
    if jobs == 1:
        assert ahead == 1
    else:  # a few groups ahead (a packed projection's group reads several weights), never the whole file
        assert 1 <= ahead < len(counting.reads)


def test_progress_reports_each_layer_and_head(built):
    *_, messages = built
    assert sum("model.onnx: layer" in m for m in messages) == 4
    assert any(ORT_HEAD_FILE in m for m in messages) and any(ONNX_GENAI_HEAD_FILE in m for m in messages)


def test_node_names_are_explicit_and_unique(built):
    _, _, _, out, _ = built
    names = [n.name for n in onnx.load(out / "model.onnx", load_external_data=False).graph.node]
    assert all(names) and len(names) == len(set(names))


DIGEST_SCRIPT = """
import hashlib, sys
sys.path.insert(0, {repo!r})
from mtpc.ir import QuantizationPlan, QuantScheme
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch
from tests.graphs.tiny import emit, make_ir
arch = tiny_arch()
plan = QuantizationPlan(default=QuantScheme(bits=4, block_size=32))
artifacts, _ = emit(make_ir(arch, quantization=plan), seeded_store(arch, 0))
for art in artifacts:
    print(art.relpath, hashlib.sha256(art.read()).hexdigest())
"""


def test_bytes_do_not_depend_on_hash_seed():
    digests = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-c", DIGEST_SCRIPT.format(repo=str(REPO))], env=env, cwd=REPO,
                                capture_output=True, text=True, check=True)
        digests.append(result.stdout)
    assert digests[0] == digests[1] and digests[0].count("\n") == 6


def test_emitting_twice_gives_identical_bytes(arch, store):
    first, _ = emit(make_ir(arch), store)
    second, _ = emit(make_ir(arch), store)
    assert [hashlib.sha256(a.read()).digest() for a in first] == [hashlib.sha256(a.read()).digest() for a in second]
