"""Cross-artifact checks over hand-made packages: a sound one, and ones broken one way each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, numpy_helper

from mtpc.checks import check_package, schema_for
from mtpc.pipeline.driver import build
from mtpc.output.write import write_package
from tests.cli import handmade as hm
from tests.fixtures.package_files import remanifest

REPO = Path(__file__).resolve().parents[2]


def lines(root) -> list[str]:
    return [f.render() for f in check_package(root)]


def test_sound_package_has_no_findings(tmp_path):
    assert lines(hm.write_package(tmp_path)) == []


def test_renamed_graph_tensor_is_reported_at_the_config_key_that_names_it(tmp_path):
    inputs, outputs = hm.main_io()
    hm.write_package(tmp_path, main=(inputs, hm.renamed(outputs, "present.1.key", "present.1.k")))
    assert lines(tmp_path) == [
        "genai_config.json:/model/decoder/outputs/present_key_names: 'present.1.key' is not an output of model.onnx"
    ]


def test_renamed_state_input_is_also_an_input_nobody_feeds(tmp_path):
    inputs, outputs = hm.main_io()
    hm.write_package(tmp_path, main=(hm.renamed(inputs, "past.2.conv", "past.2.conv_state"), outputs))
    assert lines(tmp_path) == [
        "genai_config.json:/model/decoder/inputs: model.onnx input 'past.2.conv_state' is not named here, so the runtime never feeds it",
        "genai_config.json:/model/decoder/inputs/past_conv_names: 'past.2.conv' is not an input of model.onnx",
    ]


def test_head_width_mismatch_names_both_tensors(tmp_path):
    inputs, outputs = hm.head_io()
    wide = hm.reshaped(inputs, "hidden_states", TensorProto.FLOAT, ["batch_size", "sequence_length", 48])
    hm.write_package(tmp_path, head=(wide, outputs))
    found = lines(tmp_path)
    assert (
        "genai_config.json:/model/mtp/main_hidden_states: main output 'hidden_states' (model.onnx) and head input "
        "'hidden_states' (mtp/mtp.onnx) differ in width (last dim): 32 vs 48" in found
    )
    # The head's own folder config pairs the same two tensors for og.MtpGenerator.
    assert any(f.startswith("mtp/genai_config.json:/model/decoder/inputs/hidden_states:") and "48" in f for f in found)
    assert "mtp/genai_config.json:/model/decoder/hidden_size: is 32 but 'hidden_states' in mtp/mtp.onnx is 48 wide" in found


def test_head_dtype_and_rank_mismatch(tmp_path):
    inputs, outputs = hm.head_io()
    packed = hm.reshaped(inputs, "hidden_states", TensorProto.FLOAT16, ["num_tokens", 32])
    hm.write_package(tmp_path, head=(packed, outputs))
    found = [f for f in lines(tmp_path) if f.startswith("genai_config.json:/model/mtp/main_hidden_states")]
    assert any("differ in dtype: float32 vs float16" in f for f in found)
    assert any("differ in rank: 3 vs 2" in f for f in found)


def test_main_hidden_states_must_be_a_main_output(tmp_path):
    cfg = hm.main_config()
    cfg["model"]["mtp"]["main_hidden_states"] = "last_hidden"
    hm.write_package(tmp_path, config=cfg)
    found = lines(tmp_path)
    assert "genai_config.json:/model/mtp/main_hidden_states: 'last_hidden' is not an output of model.onnx" in found


def test_missing_required_key_is_a_schema_finding_at_its_parent(tmp_path):
    cfg = hm.main_config()
    del cfg["model"]["context_length"]
    hm.write_package(tmp_path, config=cfg)
    found = lines(tmp_path)
    assert len(found) == 1
    assert found[0].startswith("genai_config.json:/model: 'context_length' is a required property")


def test_parent_directory_in_a_filename_is_refused_once(tmp_path):
    cfg = hm.main_config()
    cfg["model"]["mtp"]["filename"] = "../mtp.onnx"
    hm.write_package(tmp_path, config=cfg)
    about_it = [f for f in lines(tmp_path) if f.startswith("genai_config.json:/model/mtp/filename:")]
    assert about_it == ["genai_config.json:/model/mtp/filename: '../mtp.onnx' must not contain '..'"]


def test_missing_external_data_file(tmp_path):
    hm.write_package(tmp_path)
    (tmp_path / "model.onnx.data").unlink()
    assert lines(tmp_path) == ["model.onnx:/: 'model.onnx.data' does not exist in the package"]


def rewrite_external_data(graph_path, **entries) -> None:
    """Set (or, with None, drop) external_data keys on every external initializer of a saved graph."""
    model = onnx.load(str(graph_path), load_external_data=False)
    for init in model.graph.initializer:
        kept = {e.key: e.value for e in init.external_data if e.key not in entries}
        kept.update({k: v for k, v in entries.items() if v is not None})
        del init.external_data[:]
        for key, value in kept.items():
            init.external_data.add(key=key, value=value)
    onnx.save(model, str(graph_path))


@pytest.mark.parametrize(
    "location, message",
    [
        ("../model.onnx.data", "'../model.onnx.data' must not contain '..'"),
        ("/tmp/model.onnx.data", "'/tmp/model.onnx.data' must be a relative path"),
    ],
)
def test_external_data_outside_the_package(tmp_path, location, message):
    hm.write_package(tmp_path)
    rewrite_external_data(tmp_path / "model.onnx", location=location)
    assert lines(tmp_path) == [f"model.onnx:/: {message}"]


def test_external_data_without_a_length_needs_what_its_dims_and_dtype_take(tmp_path):
    hm.write_package(tmp_path)
    rewrite_external_data(tmp_path / "model.onnx", length=None)
    data = tmp_path / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:-1])
    need = hm.VOCAB * hm.HIDDEN * 4  # the float32 embedding
    assert lines(tmp_path) == [
        f"model.onnx.data:/: model.onnx initializer 'model.embed_tokens.weight' ends at byte {need}, the file has {need - 1} bytes (truncated?)"
    ]


@pytest.mark.parametrize("offset", ["-8", "0x10", ""])
def test_malformed_external_data_offset(tmp_path, offset):
    hm.write_package(tmp_path)
    rewrite_external_data(tmp_path / "model.onnx", offset=offset)
    assert lines(tmp_path) == [
        f"model.onnx:/: initializer 'model.embed_tokens.weight': external-data offset {offset!r} is not a byte count"
    ]


def test_external_data_with_no_location(tmp_path):
    hm.write_package(tmp_path)
    rewrite_external_data(tmp_path / "model.onnx", location=None)
    assert lines(tmp_path) == ["model.onnx:/: initializer 'model.embed_tokens.weight' is stored externally but names no location"]


# ----------------------------------------------------------------------------- a compiled package


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compiled") / "pkg"
    write_package(build(REPO / "specs" / "qwen35-tiny-mtp.yaml").artifacts, folder)
    return folder


def extents(graph_path, location: str) -> dict[str, int]:
    """initializer -> the byte its external data in `location` ends at, straight from the graph's external_data entries."""
    model = onnx.load(str(graph_path), load_external_data=False)
    ends = {}
    for init in model.graph.initializer:
        entries = {e.key: e.value for e in init.external_data}
        if entries.get("location") == location:
            ends[init.name] = int(entries.get("offset", 0)) + int(entries["length"])
    return ends


def test_compiled_package_is_sound(compiled):
    assert lines(compiled) == []


def test_compiled_package_with_a_truncated_data_file(compiled, tmp_path):
    package = shutil.copytree(compiled, tmp_path / "pkg")
    data = package / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:1000])
    ends = extents(package / "model.onnx", "model.onnx.data")
    last = max(ends, key=ends.get)
    past = sum(end > 1000 for end in ends.values())
    # Both graphs that read the file say so: onnx-genai's decoder.onnx (the unwindowed main graph) and model.onnx.
    per_graph = [f"model.onnx.data:/: {graph} initializer {last!r} ends at byte {ends[last]}, the file has 1000 bytes "
                 f"(truncated?); {past} of the {len(ends)} {graph} initializers in it run past the end"
                 for graph in ("decoder.onnx", "model.onnx")]
    assert extents(package / "decoder.onnx", "model.onnx.data") == ends
    assert lines(package) == [
        per_graph[0],
        f"model.onnx.data:/: has 1000 bytes, manifest.json records {ends[last]}: truncated or changed since it was written",
        per_graph[1],
    ]  # the graphs' findings hold without a manifest too: (manifest.json removed)
    (package / "manifest.json").unlink()
    assert lines(package) == per_graph
    # The finding is a real failure: onnxruntime refuses the graph.
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="out of bounds"):
        ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])


def _move_external(graph_path, name: str, **entries: str) -> None:
    model = onnx.load(str(graph_path), load_external_data=False)
    init = next(i for i in model.graph.initializer if i.name == name)
    for entry in init.external_data:
        if entry.key in entries:
            entry.value = entries[entry.key]
    onnx.save(model, str(graph_path))


def test_main_and_head_read_the_shared_embedding_at_one_place(compiled):
    main = {i.name: {e.key: e.value for e in i.external_data}
            for i in onnx.load(str(compiled / "model.onnx"), load_external_data=False).graph.initializer}
    head = {i.name: {e.key: e.value for e in i.external_data}
            for i in onnx.load(str(compiled / "mtp" / "mtp.onnx"), load_external_data=False).graph.initializer}
    assert main["model.embed_tokens.weight"]["location"] == "mtp/mtp.onnx.data"
    assert head["model.embed_tokens.weight"]["location"] == "mtp.onnx.data"
    assert main["model.embed_tokens.weight"]["offset"] == head["model.embed_tokens.weight"]["offset"]


def test_a_head_reading_the_shared_embedding_elsewhere_is_reported(compiled, tmp_path):
    package = shutil.copytree(compiled, tmp_path / "pkg")
    _move_external(package / "mtp" / "mtp.onnx", "model.embed_tokens.weight", offset="64")
    found = lines(package)
    assert any(
        line.startswith("mtp/mtp.onnx:/: initializer 'model.embed_tokens.weight' is read from mtp/mtp.onnx.data at "
                        "offset 64 (length 65536), but model.onnx reads it at offset 0 (length 65536)")
        for line in found), found


def test_compiled_head_one_byte_short(compiled, tmp_path):
    package = shutil.copytree(compiled, tmp_path / "pkg")
    data = package / "mtp" / "mtp.onnx.data"
    size = data.stat().st_size - 1
    data.write_bytes(data.read_bytes()[:size])
    ends = extents(package / "mtp" / "mtp.onnx", "mtp.onnx.data")
    last = max(ends, key=ends.get)
    assert lines(package) == [
        f"mtp/mtp.onnx.data:/: has {size} bytes, manifest.json records {size + 1}: truncated or changed since it was written",
        f"mtp/mtp.onnx.data:/: mtp/mtp.onnx initializer {last!r} ends at byte {ends[last]}, the file has {size} bytes (truncated?)",
    ]


def test_a_layer_without_any_state_tensor(tmp_path):
    inputs, outputs = hm.main_io()
    keep = lambda vis: [v for v in vis if ".3." not in v.name]  # noqa: E731
    hm.write_package(tmp_path, main=(keep(inputs), keep(outputs)))
    assert lines(tmp_path) == [
        "genai_config.json:/model/decoder: layer 3 has no state tensors in model.onnx (num_hidden_layers is 4)"
    ]


def test_layer_types_decide_which_layers_need_which_state(tmp_path):
    cfg = hm.main_config()
    # The config claims layer 3 is linear: its conv / recurrent tensors must exist, its KV need not.
    cfg["model"]["decoder"]["layer_types"] = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
    hm.write_package(tmp_path, config=cfg)
    found = lines(tmp_path)
    assert "genai_config.json:/model/decoder/inputs/past_conv_names: 'past.3.conv' is not an input of model.onnx" in found
    assert "genai_config.json:/model/decoder/outputs/present_recurrent_names: 'present.3.recurrent' is not an output of model.onnx" in found


def test_paged_main_with_dense_head(tmp_path):
    inputs, outputs = hm.main_io()
    inputs = [v for v in inputs if v.name != "attention_mask"] + [
        hm._vi("block_table", TensorProto.INT32, ["batch_size", "max_num_blocks"])
    ]
    cfg = hm.main_config()
    del cfg["model"]["decoder"]["inputs"]["attention_mask"]
    cfg["model"]["decoder"]["inputs"]["block_table"] = "block_table"
    hm.write_package(tmp_path, config=cfg, main=(inputs, outputs))
    found = lines(tmp_path)
    assert any(
        f.startswith("genai_config.json:/model/mtp/filename: model.onnx is paged (input 'block_table')") for f in found
    )


def test_unparseable_config(tmp_path):
    hm.write_package(tmp_path)
    (tmp_path / "mtp" / "genai_config.json").write_text("{not json", encoding="utf-8")
    found = lines(tmp_path)
    assert len(found) == 1 and found[0].startswith("mtp/genai_config.json:/: cannot be parsed:")


# ----------------------------------------------------------------------------- onnx-genai sidecar


def _flat_package(tmp_path, *, embedding="model.embed_tokens.weight", seed="hidden_states", width=hm.HIDDEN):
    """A hand-made onnx-genai package of the layout mtpc emits: flat metadata, the sidecar declared in config.json."""
    hm.write_package(tmp_path)
    head_inputs = [
        hm._vi("inputs_embeds", TensorProto.FLOAT, ["batch_size", "sequence_length", hm.HIDDEN]),
        hm._vi("hidden_states", TensorProto.FLOAT, ["batch_size", "sequence_length", hm.HIDDEN]),
    ]
    head_outputs = [hm._vi("mtp_hidden", TensorProto.FLOAT, ["batch_size", "sequence_length", hm.HIDDEN])]
    (tmp_path / "mtp_sidecar").mkdir()
    hm.save_graph(tmp_path / "mtp_sidecar" / "mtp_sidecar.onnx", head_inputs, head_outputs)
    metadata = {
        "schema_version": "v1",
        "required_capabilities": ["kv_cache", "grouped_query_attention"],
        "model": {
            "vocab_size": hm.VOCAB,
            "max_sequence_length": 128,
            "attention": {"type": "grouped_query_attention", "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 16},
            "io": {"sequence_source": "token_ids", "token_input": "input_ids", "attention_mask_input": "attention_mask",
                   "position_ids_input": "position_ids", "logits_output": "logits", "hidden_output": "hidden_states",
                   "kv_ownership": "owned", "kv_layout": "head_major_bnsh",
                   "kv_inputs": ["past_key_values.1.key", "past_key_values.1.value"],
                   "kv_outputs": ["present.1.key", "present.1.valu"]},
        },
    }
    speculator = {
        "proposal_type": "mtp",
        "model": "mtp_sidecar/mtp_sidecar.onnx",
        "num_speculative_tokens": 1,
        "target_hidden_output": seed,
        "target_hidden_layout": "BSH",
        "target_hidden_size": width,
        "hc_mult": 1,
        "mtp_hidden_output": "mtp_hidden",
        "kv_mode": "proposal_local",
        "embedding": {"source": "target_initializer", "name": embedding},
        "lm_head": {"source": "target_initializer", "name": "lm_head.weight"},
        "vocab_size": hm.VOCAB,
    }
    (tmp_path / "inference_metadata.yaml").write_text(yaml.safe_dump(metadata), encoding="utf-8")
    (tmp_path / "config.json").write_text(json.dumps({"speculator_config": speculator}), encoding="utf-8")
    return tmp_path


def test_flat_metadata_names_and_borrowed_initializers(tmp_path):
    found = lines(_flat_package(tmp_path, seed="hidden_states.3", width=48))
    assert found == [
        "config.json:/speculator_config/embedding/name: 'model.embed_tokens.weight' is 32 wide but target_hidden_size is 48",
        # the hand-made target has an embedding but no lm_head initializer
        "config.json:/speculator_config/lm_head/name: 'lm_head.weight' is not an initializer of model.onnx",
        "config.json:/speculator_config/target_hidden_output: 'hidden_states.3' is not an output of model.onnx",
        "config.json:/speculator_config/target_hidden_size: is 48 but mtp_sidecar/mtp_sidecar.onnx input 'inputs_embeds' is 32 wide",
        "inference_metadata.yaml:/model/io/kv_outputs/1: 'present.1.valu' is not an output of model.onnx",
    ]


def _target_initializers(folder: Path, *, drop=(), nodes=(), **arrays) -> Path:
    """The flat package's model.onnx with initializers added (name=array; a `__` in a name stands for '.'),
    some dropped, and nodes added: the checks read names, dtypes, shapes and MatMulNBits attributes only."""
    path = folder / "model.onnx"
    model = onnx.load(str(path))
    kept = [t for t in model.graph.initializer if t.name not in drop]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept + [numpy_helper.from_array(a, n.replace("__", ".")) for n, a in arrays.items()])
    model.graph.node.extend(nodes)
    onnx.save(model, str(path))
    return folder


def _speculator_findings(folder: Path) -> list[str]:
    return [f.split(": ", 1)[1] for f in lines(folder) if f.startswith("config.json:/speculator_config/")]


PACKED = np.zeros((hm.VOCAB, 1, 16), np.uint8)  # [N, k_blocks, blob]: 4-bit blocks of 32 over hidden 32
SCALES = np.ones((hm.VOCAB, 1), np.float32)


def _reader(bits=4, block_size=32, scales="lm_head.scales", zero_points=None):
    inputs = ["x", "lm_head.weight", scales] + ([zero_points] if zero_points else [])
    return onnx.helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=hm.HIDDEN, N=hm.VOCAB,
                                 bits=bits, block_size=block_size)


def test_a_dense_float_lm_head_is_borrowed_either_way_round(tmp_path):
    for shape in ((hm.HIDDEN, hm.VOCAB), (hm.VOCAB, hm.HIDDEN)):
        folder = _target_initializers(_flat_package(tmp_path / str(shape)), lm_head__weight=np.zeros(shape, np.float16))
        assert _speculator_findings(folder) == []
    folder = _target_initializers(_flat_package(tmp_path / "wide"), lm_head__weight=np.zeros((hm.HIDDEN, hm.VOCAB + 1), np.float32))
    assert _speculator_findings(folder) == [
        f"'lm_head.weight' is [{hm.HIDDEN}, {hm.VOCAB + 1}]; a dense LM head must be [{hm.HIDDEN}, {hm.VOCAB}] "
        f"or [{hm.VOCAB}, {hm.HIDDEN}] (hidden, vocabulary)"
    ]


def test_a_packed_lm_head_is_borrowed_under_onnx_genais_names(tmp_path):
    folder = _target_initializers(_flat_package(tmp_path), lm_head__weight=PACKED, lm_head__scales=SCALES, nodes=[_reader()])
    assert _speculator_findings(folder) == []


def test_a_packed_lm_head_with_builder_names_is_refused_for_its_scales(tmp_path):
    # `<weight>_scales` is where onnxruntime-genai's builder puts them; onnx-genai looks for `<prefix>.scales`.
    folder = _target_initializers(_flat_package(tmp_path), lm_head__weight=PACKED, lm_head__weight_scales=SCALES)
    assert _speculator_findings(folder) == [
        "'lm_head.weight' is packed, so onnx-genai takes its scales from 'lm_head.scales', which is not an initializer of model.onnx"
    ]


def test_a_packed_lm_head_read_with_another_encoding_or_other_companions_is_refused(tmp_path):
    folder = _target_initializers(_flat_package(tmp_path / "a"), lm_head__weight=PACKED, lm_head__scales=SCALES,
                                  nodes=[_reader(bits=8, block_size=16)])
    assert _speculator_findings(folder) == [
        "onnx-genai would read 'lm_head.weight' as 4-bit blocks of 32 (from its shape and target_hidden_size), "
        "but model.onnx reads it as 8-bit blocks of 16"
    ]
    points = np.zeros((hm.VOCAB, 1), np.uint8)
    folder = _target_initializers(_flat_package(tmp_path / "b"), lm_head__weight=PACKED, lm_head__scales=SCALES,
                                  lm_head__zero_points=points, nodes=[_reader()])
    assert _speculator_findings(folder) == [
        "onnx-genai would pair 'lm_head.weight' with scales 'lm_head.scales' and zero points 'lm_head.zero_points', "
        "but model.onnx reads it with 'lm_head.scales' and None"
    ]


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"lm_head__weight": np.zeros((hm.VOCAB, 3, 16), np.uint8), "lm_head__scales": np.ones((hm.VOCAB, 3), np.float32)},
         "'lm_head.weight' has 3 blocks per row, which does not divide target_hidden_size 32: onnx-genai derives the block size from the two"),
        ({"lm_head__weight": np.zeros((hm.VOCAB, 1, 12), np.uint8), "lm_head__scales": SCALES},
         "'lm_head.weight' packs 12 bytes per block of 32 (32 / 1 blocks), which is no 2, 4, 8-bit encoding"),
        ({"lm_head__weight": np.zeros((hm.VOCAB + 1, 1, 16), np.uint8), "lm_head__scales": np.ones((hm.VOCAB + 1, 1), np.float32)},
         f"'lm_head.weight' has {hm.VOCAB + 1} rows but the vocabulary (the embedding's rows) is {hm.VOCAB}"),
        ({"lm_head__weight": PACKED, "lm_head__scales": np.ones((hm.VOCAB, 1), np.int32)},
         f"its scales 'lm_head.scales' are int32 [{hm.VOCAB}, 1]; onnx-genai needs float32, float16 or bfloat16 [{hm.VOCAB}, 1]"),
        ({"lm_head__weight": PACKED, "lm_head__scales": SCALES, "lm_head__zero_points": np.zeros((hm.VOCAB, 2), np.uint8)},
         f"its zero points 'lm_head.zero_points' are uint8 [{hm.VOCAB}, 2]; MatMulNBits takes uint8 [{hm.VOCAB}, 1] (or the scales' type and shape)"),
        ({"lm_head__weight": np.zeros((hm.VOCAB, hm.HIDDEN), np.int8)},
         f"'lm_head.weight' (int8 [{hm.VOCAB}, {hm.HIDDEN}]) is neither a dense float [hidden, vocab] / [vocab, hidden] "
         "matrix nor a MatMulNBits-packed uint8 [N, k_blocks, blob] tensor"),
    ],
    ids=["blocks-do-not-divide-hidden", "no-bit-width", "rows-are-not-the-vocabulary", "int-scales", "zero-points-shape", "int8-matrix"],
)
def test_a_borrowed_lm_head_onnx_genai_would_refuse(tmp_path, arrays, message):
    assert _speculator_findings(_target_initializers(_flat_package(tmp_path), **arrays)) == [message]


def test_a_borrowed_embedding_must_be_a_dense_float_table(tmp_path):
    lm_head = {"lm_head__weight": np.zeros((hm.HIDDEN, hm.VOCAB), np.float32)}
    folder = _target_initializers(_flat_package(tmp_path / "uint8"), drop=("model.embed_tokens.weight",),
                                  model__embed_tokens__weight=np.zeros((hm.VOCAB, hm.HIDDEN), np.uint8), **lm_head)
    assert _speculator_findings(folder) == [
        "'model.embed_tokens.weight' is uint8; the sidecar borrows a float32, float16 or bfloat16 embedding"
    ]
    # GatherBlockQuantized stores the table under other names (what compile wrote before issue 7).
    folder = _target_initializers(_flat_package(tmp_path / "gbq"), drop=("model.embed_tokens.weight",),
                                  model__embed_tokens__weight_Q4=np.zeros((hm.VOCAB, hm.HIDDEN // 2), np.uint8), **lm_head)
    assert _speculator_findings(folder) == [
        "'model.embed_tokens.weight' is not an initializer of model.onnx (it is stored quantized, as "
        "'model.embed_tokens.weight_Q4'; the sidecar borrows only a dense float embedding)"
    ]


def test_config_json_speculator_is_validated_and_checked(tmp_path):
    hm.write_package(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({"speculator_config": {"proposal_type": "mtp", "model": "missing.onnx", "target_hidden_layout": "bsh"}}),
        encoding="utf-8",
    )
    found = lines(tmp_path)
    assert "config.json:/speculator_config/model: 'missing.onnx' does not exist in the package" in found
    assert any(f.startswith("config.json:/speculator_config/target_hidden_layout: 'BSH' was expected") for f in found)


def _edited_speculator(compiled, tmp_path, edit) -> Path:
    """The compiled package with its config.json speculator block edited by hand."""
    folder = tmp_path / "pkg"
    shutil.copytree(compiled, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    edit(config["speculator_config"])
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_accepted_prefix_kv_mode_is_reported(compiled, tmp_path):
    folder = _edited_speculator(compiled, tmp_path, lambda block: block.update(kv_mode="accepted_prefix"))
    found = lines(folder)
    # The schema pins the value; onnx-genai's own load-time refusal (reference §4) is reported beside it.
    assert any(f.startswith("config.json:/speculator_config/kv_mode: MTP kv_mode accepted_prefix is declared but not executable") for f in found)


def test_removed_hc_mult_is_reported_with_the_runtime_message(compiled, tmp_path):
    folder = _edited_speculator(compiled, tmp_path, lambda block: block.pop("hc_mult"))
    assert "config.json:/speculator_config/hc_mult: mtp metadata is missing `hc_mult`" in lines(folder)


@pytest.mark.parametrize("key", ["speculative", "speculator_config"])
def test_a_sidecar_declared_in_the_metadata_is_refused_with_the_reason(tmp_path, key):
    """onnx-genai's parser refuses either key in a package without a pipeline (the whole file with it)."""
    folder = _flat_package(tmp_path)
    metadata = yaml.safe_load((folder / "inference_metadata.yaml").read_text(encoding="utf-8"))
    metadata[key] = json.loads((folder / "config.json").read_text(encoding="utf-8"))["speculator_config"]
    (folder / "inference_metadata.yaml").write_text(yaml.safe_dump(metadata), encoding="utf-8")
    found = [f for f in lines(folder) if f.startswith(f"inference_metadata.yaml:/{key}")]
    assert len(found) == 1 and "config.json (speculator_config)" in found[0], found


def _schema_file(name: str) -> str:
    """An emitter's schema declaration as a file in schemas/ (emitters may leave off `.schema.json`)."""
    return name if name.endswith(".json") else f"{name}.schema.json"


@pytest.mark.parametrize("spec", sorted(p.name for p in (REPO / "specs").glob("*.yaml")))
def test_check_reads_each_file_against_the_schema_its_emitter_declares(spec):
    declared = [a for a in build(REPO / "specs" / spec).artifacts if a.schema and not a.schema.startswith("conformance:")]
    assert declared
    for artifact in declared:
        layout = None
        if artifact.relpath == "inference_metadata.yaml":
            pipeline = yaml.safe_load(artifact.read()).get("pipeline")
            layout = "workflow" if isinstance(pipeline, dict) and "workflow" in pipeline else "flat"
        assert schema_for(PurePosixPath(artifact.relpath).name, layout) == _schema_file(artifact.schema), artifact.relpath


# ----------------------------------------------------------------------------- shared initializers


@pytest.fixture(scope="module")
def paged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("paged") / "pkg"
    write_package(build(REPO / "specs" / "qwen35-tiny-paged.yaml").artifacts, folder)
    return folder


def _edited_shared(paged, tmp_path, edit, config="genai_config.json") -> Path:
    pkg = tmp_path / "pkg"
    shutil.copytree(paged, pkg)
    cfg = json.loads((pkg / config).read_text())
    edit(cfg["model"])
    (pkg / config).write_text(json.dumps(cfg))
    return remanifest(pkg)  # a package compile wrote so, whose configs are what is checked here


def _both(edit_entry):
    """Apply the same edit to the decoder's and the head's first entry, so the lists stay identical."""
    def edit(model):
        for section in ("decoder", "mtp"):
            edit_entry(model[section]["shared_initializers"][0])
    return edit


def _initializer(graph_path, name) -> onnx.TensorProto:
    model = onnx.load(str(graph_path), load_external_data=False)
    return next(i for i in model.graph.initializer if i.name == name)


def test_compiled_paged_package_with_shared_initializers_is_sound(paged):
    cfg = json.loads((paged / "genai_config.json").read_text())
    assert cfg["model"]["decoder"]["shared_initializers"]
    # One copy on disk, in the head's folder: the head names it beside itself, the root config from the root.
    assert {e["data_file"] for e in cfg["model"]["decoder"]["shared_initializers"]} == {"mtp/mtp.onnx.data"}
    head = json.loads((paged / "mtp" / "genai_config.json").read_text())
    assert {e["data_file"] for e in head["model"]["decoder"]["shared_initializers"]} == {"mtp.onnx.data"}
    assert lines(paged) == []


@pytest.mark.parametrize(
    "data_file, message",
    [
        ("gone.data", "'gone.data' does not exist in the package"),
        ("../model.onnx.data", "'../model.onnx.data' points outside the package"),
        ("mtp/../../model.onnx.data", "'mtp/../../model.onnx.data' points outside the package"),
    ],
)
def test_shared_initializer_data_file_must_be_in_the_package(paged, tmp_path, data_file, message):
    pkg = _edited_shared(paged, tmp_path, _both(lambda e: e.update(data_file=data_file)))
    assert lines(pkg) == [
        f"genai_config.json:/model/{section}/shared_initializers/0/data_file: {message}" for section in ("decoder", "mtp")
    ]


def test_shared_initializer_absolute_data_file_is_reported_once(paged, tmp_path):
    pkg = _edited_shared(paged, tmp_path, _both(lambda e: e.update(data_file="/model.onnx.data")))
    assert lines(pkg) == [
        f"genai_config.json:/model/{section}/shared_initializers/0/data_file: '/model.onnx.data' must be a relative path"
        for section in ("decoder", "mtp")
    ]


def test_shared_initializer_past_the_end_of_its_data_file(paged, tmp_path):
    size = (paged / "mtp" / "mtp.onnx.data").stat().st_size  # the one copy lives in the head's folder
    pkg = _edited_shared(paged, tmp_path, _both(lambda e: e.update(offset=str(size - 1), length="2")))
    assert lines(pkg) == [
        f"genai_config.json:/model/{section}/shared_initializers/0: offset {size - 1} + length 2 ends at byte {size + 1}, "
        f"past the end of mtp/mtp.onnx.data ({size} bytes)"
        for section in ("decoder", "mtp")
    ]


def test_shared_initializer_malformed_offset_is_one_schema_finding_each(paged, tmp_path):
    pkg = _edited_shared(paged, tmp_path, _both(lambda e: e.update(offset="0x10")))
    found = lines(pkg)
    assert len(found) == 2
    assert all("/shared_initializers/0/offset: '0x10' does not match" in f for f in found)


def test_shared_initializer_names_a_main_graph_initializer_of_its_dtype_and_shape(paged, tmp_path):
    entry = json.loads((paged / "genai_config.json").read_text())["model"]["decoder"]["shared_initializers"][0]
    real = _initializer(paged / "model.onnx", entry["name"])
    pkg = _edited_shared(paged, tmp_path, _both(lambda e: e.update(name="ghost")))
    assert lines(pkg) == [
        f"genai_config.json:/model/{s}/shared_initializers/0/name: 'ghost' is not an initializer of model.onnx" for s in ("decoder", "mtp")
    ]
    wrong_type = TensorProto.DOUBLE if real.data_type != TensorProto.DOUBLE else TensorProto.FLOAT
    pkg = _edited_shared(paged, tmp_path / "b", _both(lambda e: e.update(data_type=wrong_type, shape=[7])), )
    found = lines(pkg)
    assert f"genai_config.json:/model/mtp/shared_initializers/0/shape: is [7] but {entry['name']!r} in model.onnx is {list(real.dims)}" in found
    assert any(f.startswith("genai_config.json:/model/decoder/shared_initializers/0/data_type: ") and f"in model.onnx is {real.data_type} " in f for f in found)
    assert len(found) == 4


def test_head_folder_shared_initializers_are_checked_against_the_main_graph(paged, tmp_path):
    pkg = _edited_shared(paged, tmp_path, lambda m: m["decoder"]["shared_initializers"][0].update(shape=[3]), "mtp/genai_config.json")
    assert [f.split(":")[1] for f in lines(pkg)] == ["/model/decoder/shared_initializers/0/shape"]


def test_decoder_and_head_shared_lists_must_be_identical(paged, tmp_path):
    pkg = _edited_shared(paged, tmp_path, lambda m: m["mtp"]["shared_initializers"].pop())
    assert lines(pkg) == [
        "genai_config.json:/model/mtp/shared_initializers: differs from model.decoder.shared_initializers; "
        "the builder shares one set of weights, so the lists must be identical"
    ]


def test_corrupt_main_graph_is_the_only_finding(compiled, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(compiled, pkg)
    (pkg / "model.onnx").write_bytes(b"not a model")
    found = lines(pkg)
    assert len(found) == 2 and found[0].startswith("model.onnx:/: cannot be read as an ONNX model")
    assert found[1].startswith("model.onnx:/: has 11 bytes, manifest.json records ")  # and nothing that follows from it
