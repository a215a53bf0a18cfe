"""Graphs left unbuilt (`check SPEC`, `plan`): the files and I/O the contract checks read in their place
are the built package's, for every shipped spec and valid case, so the shortcut cannot drift from
what compile writes; and the checks run on that I/O still catch a config that disagrees with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.pipeline import driver
from mtpc.checks.graphs import interface_graph, read_graph
from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.pipeline.driver import build
from mtpc.emit.genai_config import reads_data_layouts
from mtpc.emit.graph_files import graph_files
from tests.fixtures.arch import tiny_arch
from tests.fixtures.corrupt import misnaming_input_ids
from tests.fixtures.gguf_writer import MIXED_TYPES, write_gguf

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.yaml")) + sorted((REPO / "tests" / "cases" / "valid").glob("*.yaml"))


@pytest.fixture(scope="module")
def gguf_spec(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("deferred")
    write_gguf(folder / "m.gguf", tiny_arch(vocab_size=300), types=MIXED_TYPES, tokenizer=True)
    spec = folder / "spec.yaml"
    spec.write_text("mtpc: 1\nname: g\nsource: {gguf: m.gguf}\nquantization:\n  default: {keep: source}\n"
                    "  overrides: [{match: embed_tokens.weight, bits: null}]\n")
    return spec


def _io(graph) -> tuple[list, list]:
    return list(graph.inputs.items()), list(graph.outputs.items())


@pytest.mark.parametrize("spec", [*SPECS, "gguf"], ids=lambda s: s if isinstance(s, str) else s.name)
def test_a_deferred_package_lists_the_built_files_and_its_graphs_io(spec, gguf_spec):
    spec = gguf_spec if spec == "gguf" else spec
    with build(spec, defer=True) as built, build(spec, defer=True, defer_graphs=True) as deferred:
        assert [a.relpath for a in deferred.artifacts] == [a.relpath for a in built.artifacts]
        real = {a.relpath: a for a in built.artifacts}
        graphs = [a for a in deferred.artifacts if a.relpath.endswith(".onnx")]
        # Every graph, deferred or not (the paged ones are built either way), has its contract's I/O.
        contracts = {graph: contract for graph, _, contract in graph_files(built.ir)}
        assert sorted(contracts) == [a.relpath for a in graphs]
        for rel, contract in contracts.items():
            assert _io(interface_graph(rel, contract)) == _io(read_graph(real[rel].content, rel)), rel
        if reads_data_layouts(deferred.ir):  # genai_config's shared_initializers need the layout: built as before
            assert all(a.interface is None and a.content == real[a.relpath].content for a in graphs)
            return
        for art in graphs:
            assert art.interface == contracts[art.relpath] and art.content is None and art.deferred
        # Deferring the graphs changes no other file: configs, metadata and reports are the built ones, byte for byte.
        for art in deferred.artifacts:
            if art.content is not None or art.document is not None:
                assert art.read() == real[art.relpath].read(), art.relpath


def test_reading_a_deferred_graph_builds_the_graphs_once_with_the_built_bytes(monkeypatch):
    from mtpc.emit import onnx_graphs

    spec = REPO / "specs" / "qwen35-tiny-mtp.yaml"
    with build(spec) as built:
        real = {a.relpath: a.read() for a in built.artifacts if a.relpath.endswith((".onnx", ".onnx.data"))}
    calls = []
    emit = onnx_graphs.emit_onnx_graphs
    monkeypatch.setattr(onnx_graphs, "emit_onnx_graphs", lambda ir, ctx: calls.append(1) or emit(ir, ctx))
    with build(spec, defer=True, defer_graphs=True) as deferred:
        assert calls == []
        read = {a.relpath: a.read() for a in deferred.artifacts if a.relpath in real}
    assert calls == [1]
    assert read == real


def test_the_checks_on_a_deferred_graphs_io_still_fail_a_config_that_disagrees(monkeypatch):
    monkeypatch.setattr(driver, "EMITTERS", misnaming_input_ids(driver.EMITTERS))
    with pytest.raises(MtpcError) as caught:
        build(REPO / "specs" / "qwen35-tiny-nohead.yaml", defer=True, defer_graphs=True)
    assert caught.value.exit_code is ExitCode.INTERNAL
    messages = [d.message for d in caught.value.diagnostics]
    assert any("'input_idz' is not an input of model.onnx" in m for m in messages), messages
    assert any("model.onnx input 'input_ids' is not named here" in m for m in messages), messages


def test_compile_builds_the_graphs_it_checks():
    with pytest.raises(ValueError):
        build(REPO / "specs" / "qwen35-tiny-nohead.yaml", defer_graphs=True)
    with build(REPO / "specs" / "qwen35-tiny-nohead.yaml") as built:
        assert all(a.content is not None and a.interface is None for a in built.artifacts if a.relpath.endswith(".onnx"))


# ----------------------------------------------------------------------------- graph inputs


def _documentary_fields_changed(ir):
    """The IR with every field `graph_inputs` leaves out set to something else: what only the documents
    say, and the runtime settings (every target setting, the head policy, the draft count)."""
    from dataclasses import replace

    from mtpc.ir import (AttentionMode, HeadPolicy, OnnxGenaiTarget, OrtGenaiTarget, QuantizationPlan, QuantOverride,
                         QuantScheme, Targets)

    plan = QuantizationPlan(default=QuantScheme(bits=8, block_size=128, symmetric=False, accuracy_level=1),
                            overrides=(QuantOverride("*", QuantScheme(bits=4, keep_source=True)),))
    ort = OrtGenaiTarget(version="9.9.9", execution_provider="cuda", attention=AttentionMode.PAGED, block_size=16,
                         max_batch_size=3, num_blocks=7, gpu_utilization_factor=0.5, max_draft_tokens=11,
                         prune_lm_head=True, kv_cache="static")
    targets = Targets(ort, OnnxGenaiTarget(layout="flat"))  # no spec could ask for these: the builders never see them
    mtp = replace(ir.mtp, head=HeadPolicy.OFF if ir.mtp.head is not HeadPolicy.OFF else HeadPolicy.ON,
                  num_speculative_tokens=ir.mtp.num_speculative_tokens + 3)
    return replace(ir, name="another-name", spec_path="/somewhere/else.yaml", notes=("a note no graph reads",),
                   quantization=plan, weights=tuple(replace(w, rule=f"override {i} (x)") for i, w in enumerate(ir.weights)),
                   targets=targets, mtp=mtp)


@pytest.mark.parametrize("spec", [*SPECS, "gguf"], ids=lambda s: s if isinstance(s, str) else s.name)
def test_the_graphs_are_built_from_their_graph_inputs_alone(spec, gguf_spec):
    """What `diff SPEC SPEC` relies on to skip building graphs: what `graph_inputs` leaves out, no graph reads."""
    from mtpc import sources
    from mtpc.emit.artifact import EmitContext
    from mtpc.emit.graph_files import graph_inputs
    from mtpc.emit.onnx_graphs import emit_onnx_graphs

    spec = gguf_spec if spec == "gguf" else spec
    with build(spec, defer=True) as built:
        graphs = {a.relpath: a.content for a in built.artifacts if a.relpath.endswith(".onnx")}
        other = _documentary_fields_changed(built.ir)
        assert other != built.ir and graph_inputs(other) == graph_inputs(built.ir)
        ctx = EmitContext(built.info, lambda: sources.open_weights(other.source, built.info))
        try:
            rebuilt = {a.relpath: a.content for a in emit_onnx_graphs(other, ctx) if a.relpath.endswith(".onnx")}
        finally:
            ctx.close()
    assert graphs and rebuilt == graphs


def test_graph_inputs_keep_what_the_graphs_are_built_from():
    from dataclasses import replace

    from mtpc.emit.graph_files import graph_inputs
    from mtpc.ir import QuantForm, SeedHidden

    with build(REPO / "specs" / "qwen35-tiny-mtp.yaml", defer=True, defer_graphs=True) as built:
        ir = built.ir
    first = ir.weights[0]
    stored_otherwise = replace(first, form=QuantForm(bits=8, block_size=32, has_zero_points=False))
    for changed in (replace(ir, weights=(stored_otherwise, *ir.weights[1:])),
                    replace(ir, precision=replace(ir.precision, io_dtype="float16")),
                    replace(ir, architecture=replace(ir.architecture, rms_norm_eps=1e-5)),
                    # What a runtime setting decides for a graph is in its decoder config (max_draft_tokens: paged state updates).
                    replace(ir, main=replace(ir.main, state_update_capacity=ir.main.state_update_capacity + 1)),
                    replace(ir, mtp=replace(ir.mtp, seed_hidden=SeedHidden.PRE_NORM))):
        assert graph_inputs(changed) != graph_inputs(ir)


def test_same_graph_inputs_is_graph_inputs_compared():
    """`diff SPEC SPEC` asks `same_graph_inputs`, which compares without copying the weights."""
    from dataclasses import replace

    from mtpc.emit.graph_files import graph_inputs, same_graph_inputs
    from mtpc.ir import QuantForm

    irs = []
    for spec in SPECS:
        with build(spec, defer=True, defer_graphs=True) as built:
            irs.append(built.ir)
    ir = irs[0]
    first = ir.weights[0]
    variants = [
        _documentary_fields_changed(ir),
        replace(ir, weights=(replace(first, form=QuantForm(bits=8, block_size=32, has_zero_points=False)), *ir.weights[1:])),
        replace(ir, weights=(replace(first, lossless=not first.lossless), *ir.weights[1:])),
        replace(ir, weights=(replace(first, accuracy_level=first.accuracy_level + 1), *ir.weights[1:])),
        replace(ir, weights=ir.weights[1:]),
        replace(ir, weights=(*ir.weights[1:], first)),
        replace(ir, precision=replace(ir.precision, io_dtype="float16")),
    ]
    pairs = [(a, b) for a in irs + variants for b in irs + variants]
    answers = [same_graph_inputs(a, b) for a, b in pairs]
    assert answers == [graph_inputs(a) == graph_inputs(b) for a, b in pairs]
    assert True in answers and answers.count(True) > len(irs) + 1  # the documentary variant is the same
