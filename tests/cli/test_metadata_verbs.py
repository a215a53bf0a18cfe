"""The metadata verbs do only the work their answer needs (issue 10, instant metadata verbs).

No timings are asserted (bench/ measures them); what is asserted is the work itself: which
modules a run imports, how often the source's header is walked, whether the tokenizer is
converted, and that libyaml's dumper writes exactly the pure-Python dumper's bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtpc.pipeline.driver import build
from mtpc.sources.gguf import layout as gguf_layout, reader as gguf_source
from mtpc.sources.gguf import tokenizer as gguf_tokenizer
from mtpc.schema.validation import dump_yaml
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import MIXED_TYPES, write_gguf

HEAVY = ("onnx_ir", "onnxruntime", "onnxruntime_genai", "onnx", "sympy", "torch")
# What `mtpc --help` needs none of: it builds every verb's parser, so a verb module that imports these at
# its top makes every run pay for them (numpy alone is a tenth of a second).
# What reading a GGUF's header needs none of (`mtpc.sources.gguf.constants`): no weight is read.
HEADER_ONLY = ("numpy", "gguf")
# What validating documents that are valid needs none of (`mtpc.schema.verdict` answers for them; jsonschema,
# with attrs and referencing, is a tenth of a second to import and is imported to word errors).
VALID_ONLY = ("jsonschema", "referencing", "attrs")
WORK = ("numpy", "yaml", "jsonschema", "gguf", "mtpc.api.compiling", "mtpc.checks", "mtpc.diffing.changes", "mtpc.pipeline.driver", "mtpc.ir")

PROBE = """
import json, sys
from mtpc.cli.main import main
watched = json.loads(sys.argv.pop(1))
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "loaded": sorted(m for m in watched if m in sys.modules)}), file=sys.stderr)
"""


def _loaded(*argv: str, cwd: Path | None = None, watched: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(watched), *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    result = json.loads(done.stderr.strip().splitlines()[-1])
    return result["code"], result["loaded"]


def main_quiet(*argv: str) -> int:
    from contextlib import redirect_stdout
    from io import StringIO

    from mtpc.cli.main import main

    with redirect_stdout(StringIO()):
        return main(list(argv))


@pytest.fixture(scope="module")
def gguf_spec(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("meta")
    write_gguf(folder / "m.gguf", tiny_arch(vocab_size=300), types=MIXED_TYPES, tokenizer=True)
    spec = folder / "spec.yaml"
    spec.write_text("mtpc: 1\nname: meta\nsource: {gguf: m.gguf}\nquantization:\n  default: {keep: source}\n")
    return spec


@pytest.mark.parametrize("argv", [["--help"], ["inspect", "--help"], ["schema"]])
def test_help_and_schema_import_no_graph_or_runtime_library(argv):
    code, loaded = _loaded(*argv)
    assert code == 0
    assert loaded == []


@pytest.mark.parametrize("argv", [["--help"], ["check", "--help"], ["diff", "--help"], ["--version"]])
def test_help_builds_every_parser_without_the_verbs_work(argv):
    code, loaded = _loaded(*argv, watched=WORK + HEAVY)
    assert code == 0
    assert loaded == []


def test_inspect_imports_no_graph_or_runtime_library(gguf_spec):
    code, loaded = _loaded("inspect", str(gguf_spec.parent / "m.gguf"), watched=HEAVY + HEADER_ONLY)
    assert code == 0
    assert loaded == []


def test_check_spec_builds_no_graph_and_imports_no_graph_or_runtime_library(gguf_spec):
    # The configs are checked against the graphs' I/O contracts (tests/emit/test_graph_files.py), so no
    # graph is built: neither onnx_ir (nor onnx, which it and the graph reader pull in) nor a runtime loads.
    code, loaded = _loaded("check", str(gguf_spec), watched=HEAVY + HEADER_ONLY + VALID_ONLY)
    assert code == 0
    assert loaded == []


def test_plan_without_a_package_to_compare_builds_no_graph(gguf_spec, tmp_path):
    # Against ./out/<name>, which does not exist here: every file is "create", so no graph bytes are needed.
    code, loaded = _loaded("plan", "-q", str(gguf_spec), cwd=tmp_path, watched=HEAVY + HEADER_ONLY + VALID_ONLY)
    assert code == 0
    assert loaded == []



@pytest.fixture(scope="module")
def gguf_spec_b(gguf_spec) -> Path:
    """`gguf_spec` with another name and an override that stores a weight as the default already does:
    the documents differ, the graphs do not (bench/vs_builder.py times this pair)."""
    spec = gguf_spec.parent / "spec_b.yaml"
    spec.write_text("mtpc: 1\nname: meta-b\nsource: {gguf: m.gguf}\nquantization:\n  default: {keep: source}\n"
                    "  overrides: [{match: lm_head.weight, keep: source}]\n")
    return spec


def test_diff_of_two_specs_with_the_same_graphs_builds_no_graph(gguf_spec, gguf_spec_b):
    code, loaded = _loaded("diff", str(gguf_spec), str(gguf_spec_b), watched=HEAVY + HEADER_ONLY + VALID_ONLY)
    assert code == 1  # they differ (name, rule, provenance, model card)
    assert loaded == []


def test_an_invalid_spec_is_still_worded_by_jsonschema(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("mtpc: 1\nname: bad\nsource: {synthetic: {seed: 0, hidden_size: 64.0}}\n")
    code, loaded = _loaded("check", str(spec), watched=VALID_ONLY)
    assert code == 1
    assert "jsonschema" in loaded


def test_diff_of_two_specs_without_their_graphs_says_what_building_them_says(gguf_spec, gguf_spec_b, monkeypatch):
    import mtpc
    from mtpc.emit import graph_files, onnx_graphs

    built = []
    emit = onnx_graphs.emit_onnx_graphs
    monkeypatch.setattr(onnx_graphs, "emit_onnx_graphs", lambda ir, ctx: built.append(1) or emit(ir, ctx))
    fast = mtpc.diff(gguf_spec, gguf_spec_b)
    assert built == []
    assert {c.file for c in fast.changes} >= {"<ir>", "quantization.json", "README.md"}
    monkeypatch.setattr(graph_files, "same_graph_inputs", lambda a, b: False)  # every graph is built and read
    slow = mtpc.diff(gguf_spec, gguf_spec_b)
    assert built == [1, 1]
    assert slow.changes == fast.changes
    assert [c.render() for c in slow.report.changes] == [c.render() for c in fast.report.changes]


# A state window that holds a verify of every draft count here keeps max_draft_tokens a runtime setting
# (with `auto`, the window follows it, and so do the main graph's state shapes).
_RUNTIME = {"ort": "{execution_provider: cpu, state_window: 5}", "og": "{layout: flat}", "mtp": ""}


@pytest.mark.parametrize("setting", [{"ort": "{execution_provider: cpu, max_draft_tokens: 3, state_window: 5}"},
                                     {"mtp": "mtp: {num_speculative_tokens: 2}\n"},
                                     {"ort": "{execution_provider: cpu, max_draft_tokens: 2, state_window: 5}",
                                      "mtp": "mtp: {num_speculative_tokens: 3}\n"}], ids=["draft", "speculative", "both"])
def test_diff_of_two_specs_that_differ_in_a_runtime_setting_builds_no_graph(gguf_spec, setting, monkeypatch):
    """A runtime setting no graph reads (what one decides for a graph, the passes write into the decoder
    configs): the documents that carry it differ, and no graph is built to say that the graphs do not."""
    import mtpc
    from mtpc.emit import graph_files, onnx_graphs

    def spec(name: str, settings: dict) -> Path:
        path = gguf_spec.parent / f"{name}.yaml"
        path.write_text(f"mtpc: 1\nname: rt\nsource: {{gguf: m.gguf}}\n{settings['mtp']}quantization:\n"
                        f"  default: {{keep: source}}\n  overrides: [{{match: embed_tokens.weight, bits: null}}]\n"
                        f"targets:\n  onnxruntime_genai: {settings['ort']}\n  onnx_genai: {settings['og']}\n")
        return path

    spec_a, spec_b = spec("runtime_a", _RUNTIME), spec("runtime_b", {**_RUNTIME, **setting})
    built = []
    emit = onnx_graphs.emit_onnx_graphs
    monkeypatch.setattr(onnx_graphs, "emit_onnx_graphs", lambda ir, ctx: built.append(1) or emit(ir, ctx))
    fast = mtpc.diff(spec_a, spec_b)
    assert built == []
    assert "<ir>" in {c.file for c in fast.changes}
    monkeypatch.setattr(graph_files, "same_graph_inputs", lambda a, b: False)  # every graph is built and read
    slow = mtpc.diff(spec_a, spec_b)
    assert built == [1, 1]
    assert slow.changes == fast.changes
    assert not any(c.file.endswith(".onnx") for c in slow.changes)


def test_the_metadata_yaml_is_rendered_only_when_its_bytes_are_needed(gguf_spec, monkeypatch, tmp_path):
    """check SPEC, plan against no package and diff read its document; compile renders it, once, and its
    bytes read back as that document (the driver keeps it for the checks)."""
    import mtpc
    from mtpc.emit import inference_metadata

    rendered = []
    real = inference_metadata._render
    monkeypatch.setattr(inference_metadata, "_render", lambda *a, **k: rendered.append(1) or real(*a, **k))
    spec = gguf_spec.parent / "metadata.yaml"
    spec.write_text(gguf_spec.read_text() + "targets:\n  onnx_genai: {layout: flat}\n")
    with build(spec, defer=True, defer_graphs=True) as deferred:
        document = {a.relpath: a for a in deferred.artifacts}["inference_metadata.yaml"].document
    assert main_quiet("plan", "-q", str(spec), "--against", str(tmp_path / "none")) == 0
    mtpc.diff(spec, spec)
    assert rendered == [] and document["schema_version"] == "v1"
    with build(spec) as compiled:
        made = {a.relpath: a for a in compiled.artifacts}["inference_metadata.yaml"]
        assert made.content is not None and made.document == document
        assert yaml.safe_load(made.content) == document
    assert rendered == [1]


@pytest.mark.parametrize("other", ["precision: {io_dtype: float16}\n", "mtp: {head: off}\n",
                                   "mtp: {num_speculative_tokens: 3}\n"])
def test_diff_of_metadata_documents_is_the_diff_of_their_text(gguf_spec, monkeypatch, other):
    """`diff SPEC SPEC` compares the metadata's documents, unrendered: the same changes as its rendered text."""
    import mtpc
    from mtpc.diffing import files

    spec_a, spec_b = gguf_spec.parent / "doc_a.yaml", gguf_spec.parent / "doc_b.yaml"
    spec_a.write_text(gguf_spec.read_text() + "targets:\n  onnx_genai: {layout: flat}\n")
    spec_b.write_text(gguf_spec.read_text() + other + "targets:\n  onnx_genai: {layout: flat}\n")
    by_document = mtpc.diff(spec_a, spec_b).changes
    real = files.diff_files
    monkeypatch.setattr(files, "diff_files", lambda old, new, documents=None: real(old, new))  # the text, parsed
    by_text = mtpc.diff(spec_a, spec_b).changes
    changed = {c.file for c in by_text}
    if "io_dtype" in other:  # every weight's stored dtype
        assert "quantization.json" in changed
    if "head" in other:  # the ports the head reads
        assert "inference_metadata.yaml" in changed
    assert by_document == by_text and by_text


def test_a_build_walks_the_gguf_header_once(gguf_spec, monkeypatch):
    made = []

    class Counting(gguf_layout.GGUFHeader):
        def __init__(self, path):
            made.append(path)
            super().__init__(path)

    monkeypatch.setattr(gguf_layout, "GGUFHeader", Counting)
    monkeypatch.setattr(gguf_layout, "_recent_headers", {})
    build(gguf_spec, defer=True).close()
    assert len(made) == 1


def test_diff_of_two_specs_of_one_gguf_describes_it_once(gguf_spec, gguf_spec_b, monkeypatch):
    import mtpc

    described = []
    real = gguf_source._describe
    monkeypatch.setattr(gguf_source, "_describe", lambda ref, header: described.append(ref) or real(ref, header))
    monkeypatch.setattr(gguf_layout, "_recent_headers", {})
    mtpc.diff(gguf_spec, gguf_spec_b)
    assert len(described) == 1


def test_a_rewritten_gguf_is_described_afresh(tmp_path):
    from mtpc.ir import SourceRef

    path = write_gguf(tmp_path / "a.gguf", tiny_arch(), seed=0)
    ref = SourceRef("gguf", str(path))
    first = gguf_source.describe(ref)
    assert gguf_source.describe(ref) is first
    write_gguf(tmp_path / "b.gguf", tiny_arch(num_layers=2), seed=1)
    (tmp_path / "b.gguf").replace(path)
    again = gguf_source.describe(ref)
    assert again is not first and again.architecture.num_layers != first.architecture.num_layers


def test_a_rewritten_gguf_is_read_afresh(tmp_path):
    path = write_gguf(tmp_path / "a.gguf", tiny_arch(), seed=0)
    first = gguf_layout.open_header(str(path))
    assert gguf_layout.open_header(str(path)) is first
    write_gguf(tmp_path / "b.gguf", tiny_arch(num_layers=2), seed=1)
    (tmp_path / "b.gguf").replace(path)
    assert gguf_layout.open_header(str(path)) is not first
    assert gguf_layout.open_header(str(path)).metadata["qwen35.block_count"] == 3


def test_check_and_plan_leave_the_tokenizer_unconverted_and_compile_converts_and_checks_it(gguf_spec, monkeypatch):
    calls = []
    real = gguf_tokenizer._build

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(gguf_tokenizer, "_build", counting)
    monkeypatch.setattr(gguf_layout, "_recent_headers", {})
    with build(gguf_spec, defer=True) as deferred:
        names = sorted(a.relpath for a in deferred.artifacts)
        assert {"tokenizer.json", "tokenizer_config.json"} <= set(names)
    assert calls == []
    with build(gguf_spec) as eager:
        assert [a.relpath for a in eager.artifacts] == names
        files = {a.relpath: a for a in eager.artifacts}
        assert files["tokenizer.json"].content is not None and not files["tokenizer.json"].deferred
        tokenizer = json.loads(files["tokenizer.json"].content)
    assert calls == [1]
    assert tokenizer["model"]["type"] == "BPE" and len(tokenizer["model"]["vocab"]) >= 256
    # Read on demand, a deferred tokenizer gives the same bytes.
    with build(gguf_spec, defer=True) as again:
        assert {a.relpath: a for a in again.artifacts}["tokenizer.json"].read() == files["tokenizer.json"].content



def test_the_vocabulary_is_located_only_when_the_tokenizer_is_written(gguf_spec, monkeypatch):
    from mtpc.sources.gguf import header as gguf_header

    located = []
    real = gguf_header.string_offsets

    def counting(buf, start, count):
        located.append(count)
        return real(buf, start, count)

    monkeypatch.setattr(gguf_header, "string_offsets", counting)
    monkeypatch.setattr(gguf_layout, "_recent_headers", {})
    build(gguf_spec, defer=True, defer_graphs=True).close()  # check SPEC, plan
    assert located == []  # stepped over by the header walk, never read
    with build(gguf_spec) as eager:  # compile: tokenizer.json is made from the vocabulary and its merges
        assert any(a.relpath == "tokenizer.json" for a in eager.artifacts)
    assert len(located) >= 2 and 300 in located



def test_each_document_of_a_build_is_parsed_once(tmp_path, monkeypatch):
    """The driver validates, the checks check, an emitter reads its YAML back: one parse serves them all."""
    from mtpc.pipeline import driver
    from mtpc.checks import package
    from mtpc.emit import inference_metadata

    spec = tmp_path / "s.yaml"
    spec.write_text("mtpc: 1\nname: once\nsource: {synthetic: {seed: 0}}\ntargets:\n"
                    "  onnxruntime_genai: {execution_provider: cpu}\n  onnx_genai: {layout: flat}\n")
    driver.build(spec, defer=True, defer_graphs=True).close()  # schemas and their validators loaded, as every run has them
    parsed: list[str] = []

    def counting(parse):
        def parse_and_count(text, *args, **kwargs):
            parsed.append(text if isinstance(text, str) else text.decode("utf-8"))
            return parse(text, *args, **kwargs)

        return parse_and_count

    for module in (driver, package, inference_metadata):
        monkeypatch.setattr(module, "read_yaml", counting(module.read_yaml))
    monkeypatch.setattr(json, "loads", counting(json.loads))
    with driver.build(spec) as built:
        documents = {a.read().decode("utf-8") for a in built.artifacts if a.relpath.endswith((".json", ".yaml"))}
    assert "inference_metadata.yaml" in {a.relpath for a in built.artifacts}
    twice = sorted({text[:60] for text in parsed if parsed.count(text) > 1 and text in documents})
    assert twice == []
    assert len([text for text in parsed if text in documents]) >= 5  # the documents were parsed, once each


TRICKY = {
    "plain": "text", "quoted": "yes", "colon": "a: b", "hash": "# not a comment", "empty": "", "null": None,
    "unicode": "héllo — ✓", "newline": "two\nlines", "tab": "a\tb", "leading space": " x", "number-like": "1e3",
    "floats": [0.0, -1.5, 1e-06, 3.4028234663852886e38, float("inf")], "ints": [0, -1, 2**40], "bools": [True, False],
    "nested": {"list": [{"a": 1}, {"b": [1, 2]}], "empty_map": {}, "empty_list": []},
    "long": "word " * 2000,
}


@pytest.mark.parametrize("flow", [None, False, True])
def test_libyaml_dumper_writes_the_pure_python_dumpers_bytes(flow):
    assert hasattr(yaml, "CSafeDumper"), "PyYAML without libyaml: the C dumper this test compares is missing"
    options = dict(sort_keys=False, default_flow_style=flow, width=4096, allow_unicode=True)
    assert dump_yaml(TRICKY, **options) == yaml.safe_dump(TRICKY, **options)
    options = dict(sort_keys=True, allow_unicode=True)
    assert dump_yaml(TRICKY, **options) == yaml.safe_dump(TRICKY, **options)


def test_emitted_metadata_is_what_the_pure_python_dumper_writes(monkeypatch, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("mtpc: 1\nname: y\nsource: {synthetic: {seed: 0}}\ntargets:\n  onnx_genai: {layout: flat}\n")
    with build(spec) as fast:
        ours = {a.relpath: a.read() for a in fast.artifacts if a.relpath.endswith(".yaml")}
    monkeypatch.setattr("mtpc.schema.validation._SAFE_DUMPER", yaml.SafeDumper)
    with build(spec) as slow:
        pure = {a.relpath: a.read() for a in slow.artifacts if a.relpath.endswith(".yaml")}
    assert ours and ours == pure


@pytest.mark.parametrize("victim", ["genai_config.json", "quantization.json", "provenance.json"])
def test_a_schema_violation_the_checks_now_validate_alone_is_still_a_bug_in_mtpc(monkeypatch, tmp_path, victim):
    """The driver leaves these files' schemas to the contract checks (one validation, not two)."""
    import dataclasses

    from mtpc.pipeline import driver
    from mtpc.util.diagnostics import ExitCode, MtpcError

    def corrupting(emitter):
        def emit(ir, ctx):
            out = []
            for art in emitter(ir, ctx):
                if art.relpath == victim:
                    doc = json.loads(art.read())
                    doc["not_a_field_of_the_schema"] = {"a": "mapping, where the schema allows only plain values"}
                    art = dataclasses.replace(art, content=json.dumps(doc).encode())
                out.append(art)
            return out

        return emit

    monkeypatch.setattr(driver, "EMITTERS", tuple((name, corrupting(e)) for name, e in driver.EMITTERS))
    spec = tmp_path / "s.yaml"
    spec.write_text("mtpc: 1\nname: bad\nsource: {synthetic: {seed: 0}}\n")
    with pytest.raises(MtpcError) as caught:
        build(spec)
    assert caught.value.exit_code is ExitCode.INTERNAL
    assert any(victim in (d.path or "") and "not_a_field_of_the_schema" in (d.path or "") + d.message
               for d in caught.value.diagnostics)
