import ast
import json
import re
from dataclasses import replace

import pytest

from mtpc.ir import AttentionMode, HeadContract, LayerKind, OnnxGenaiTarget, StateGroup
from mtpc.passes import default_pipeline
from mtpc.passes.paged_io import PagedIoRewrite

from tests.fixtures.arch import tiny_arch
from tests.fixtures.shared import shared_file
from tests.passes.ir_factory import CPU_DENSE, CUDA_DENSE, CUDA_PAGED, make_ir

ORT, ONNX = HeadContract.ORT_GENAI, HeadContract.ONNX_GENAI
PAGED_INPUTS = {
    "block_table": ("int32", ("batch_size", "max_num_blocks")),
    "cumulative_sequence_lengths": ("int32", ("batch_size + 1",)),
    "past_sequence_lengths": ("int32", ("batch_size",)),
    "attention_metadata": ("int32", (3,)),
}


def _before_and_after(**kw):
    """The IR as PagedIoRewrite receives it (all earlier passes run) and its result."""
    passes = default_pipeline().passes
    (at,) = [i for i, p in enumerate(passes) if isinstance(p, PagedIoRewrite)]
    before = make_ir(**kw)
    for p in passes[:at]:
        before = p(before).ir
    return before, passes[at](before)


@pytest.mark.parametrize("target", [CPU_DENSE, CUDA_DENSE, None])
@pytest.mark.parametrize("head", [True, False])
def test_dense_build_is_unchanged(target, head):
    before, result = _before_and_after(ort=target, arch=tiny_arch(mtp_num_layers=int(head)), onnx_genai=OnnxGenaiTarget())
    assert not result.modified
    assert result.ir is before and result.changes == ()


@pytest.fixture(scope="module")
def paged():
    before, result = _before_and_after(ort=CUDA_PAGED, onnx_genai=OnnxGenaiTarget())
    assert result.modified
    return before, result.ir


def _io(contract):
    return {t.name: (t.dtype, t.shape) for t in contract.all()}


def test_main_tokens_positions_and_logits_are_packed(paged):
    main = paged[1].main.contract
    assert main.input("input_ids").shape == ("num_tokens",)
    assert main.input("position_ids").shape == (3, "num_tokens")
    assert main.output("logits").shape == ("num_tokens", 256)


def test_main_hidden_output_and_head_hidden_input_are_num_tokens_by_hidden(paged):
    out = paged[1]
    head = out.head(ORT)
    main_hidden = out.main.contract.output(out.main.output_name("hidden_states"))
    head_hidden = head.contract.input(head.input_name("hidden_states"))
    assert main_hidden.shape == head_hidden.shape == ("num_tokens", 64)
    assert main_hidden.dtype == head_hidden.dtype == "float16"
    assert head.contract.output("hidden_states_out").shape == ("num_tokens", 64)
    assert head.contract.output("logits").shape == ("num_tokens", 256)


def test_attention_mask_is_gone_from_contract_and_names(paged):
    out = paged[1]
    for cfg in (out.main, out.head(ORT)):
        assert cfg.input_name("attention_mask") is None
        assert not cfg.contract.has_input("attention_mask")
        assert cfg.attention is AttentionMode.PAGED


def test_paged_control_inputs_are_added(paged):
    out = paged[1]
    for cfg in (out.main, out.head(ORT)):
        io = _io(cfg.contract)
        for name, spec in PAGED_INPUTS.items():
            assert cfg.input_name(name) == name
            assert io[name] == spec


def test_kv_caches_become_block_pools(paged):
    out = paged[1]
    io = _io(out.main.contract)
    for name in ("past_key_values.1.key", "past_key_values.3.value", "present.1.key", "present.3.value"):
        assert io[name] == ("float16", ("num_blocks", "block_size", 2, 64))
    head_io = _io(out.head(ORT).contract)
    assert head_io["past_key_values.0.key"] == ("float16", ("num_blocks", "block_size", 2, 64))


def test_recurrent_state_is_float32_value_major_and_conv_state_stays():
    lin = tiny_arch().linear_attention
    arch = replace(tiny_arch(), linear_attention=replace(lin, value_head_dim=8))  # Dk 16 != Dv 8
    _, result = _before_and_after(ort=CUDA_PAGED, arch=arch)
    io = _io(result.ir.main.contract)
    assert io["past.0.recurrent"] == io["present.2.recurrent"] == ("float32", ("batch_size", 4, 8, 16))
    conv_dim = 2 * 2 * 16 + 4 * 8
    assert io["past.0.conv"] == io["present.2.conv"] == ("float16", ("batch_size", conv_dim, 3))


def test_main_declares_state_groups(paged):
    # With a head, the fixed groups carry compact state updates for max_draft_tokens (2, the default) tokens.
    assert paged[1].main.state_groups == (
        StateGroup("paged_kv", (1, 3)),
        StateGroup("fixed_conv", (0, 2), state_update_capacity=2),
        StateGroup("fixed_recurrent", (0, 2), state_update_capacity=2, key_head_count=2),
    )
    assert paged[1].main.state_update_capacity == 2
    assert paged[1].head(ORT).state_groups == () and paged[1].head(ORT).state_update_capacity == 0


def test_state_updates_follow_max_draft_tokens_and_need_a_head():
    _, drafting = _before_and_after(ort=replace(CUDA_PAGED, max_draft_tokens=2))
    main = drafting.ir.main
    io = _io(main.contract)
    assert io["state_update_capture_count"] == ("int32", ("batch_size",))
    assert io["state_update_active"] == ("int32", (1,))
    assert io["state_update.0.conv_value"] == ("float16", ("batch_size", 2, 128))
    assert io["state_update.2.recurrent_capsule"] == ("float32", ("batch_size", 2 * (4 + 2 * 16 + 4 * 16)))
    assert main.input_name("state_update_capture_count") == "state_update_capture_count"
    assert main.output_name("state_update_recurrent_capsule_names") == "state_update.%d.recurrent_capsule"
    # A text-only package never drafts: nothing to roll back.
    _, text_only = _before_and_after(ort=CUDA_PAGED, arch=tiny_arch(mtp_num_layers=0))
    assert text_only.ir.main.state_update_capacity == 0
    assert not any(t.name.startswith("state_update") for t in text_only.ir.main.contract.all())


def test_onnx_genai_head_is_untouched(paged):
    before, out = paged
    assert out.head(ONNX) == before.head(ONNX)


def test_second_run_changes_nothing(paged):
    again = PagedIoRewrite()(paged[1])
    assert not again.modified and again.ir is paged[1]


# shared/reference/builder-io/dense_paged.io.txt: graph I/O of onnxruntime-genai 0.18.0's builder's paged export
# of a tiny Qwen3.5 (4 layers: 3 linear then 1 full attention; hidden 64, 2 KV heads of 16, vocab 256);
# dense_su.io.txt: the same export with state_update_capacity=4 (builder-configs/dense_su.genai_config.json).
REFERENCE_IO = "reference/builder-io/dense_paged.io.txt"
REFERENCE_STATE_UPDATE_IO = "reference/builder-io/dense_su.io.txt"
REFERENCE_DTYPES = {"INT64": "int64", "INT32": "int32", "FLOAT16": "float16", "FLOAT": "float32"}
# Per state kind, the state group holding the layers that carry it (past_key_values.N.*, past.N.conv, past.N.recurrent).
STATE_KINDS = (("paged_kv", re.compile(r"past_key_values\.(\d+)\.key")),
               ("fixed_conv", re.compile(r"past\.(\d+)\.conv")),
               ("fixed_recurrent", re.compile(r"past\.(\d+)\.recurrent")))


def reference_io(path: str = REFERENCE_IO) -> dict[str, dict[str, list[tuple[str, str, tuple]]]]:
    """{graph file: {"inputs"/"outputs": [(name, dtype, shape), ...] in the file's order}}."""
    graphs: dict[str, dict[str, list]] = {}
    section = None
    for line in shared_file(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            current = graphs.setdefault(line.split()[1].rsplit("/", 1)[-1], {"inputs": [], "outputs": []})
        elif line.strip() in ("inputs:", "outputs:"):
            section = current[line.strip()[:-1]]
        elif line.strip().startswith("metadata:"):
            section = None
        elif line.strip():
            name, dtype, dims = line.split(maxsplit=2)
            section.append((name, REFERENCE_DTYPES[dtype], tuple(ast.literal_eval(dims))))
    assert set(graphs) == {"model.onnx", "mtp.onnx"} and all(g["inputs"] and g["outputs"] for g in graphs.values())
    return graphs


def _reference_arch(mtp_num_layers: int = 1):
    """The reference model: 4 layers (3 linear, then full attention), head size 16."""
    base = tiny_arch(mtp_num_layers=mtp_num_layers)
    return replace(
        base,
        head_dim=16,
        rope=replace(base.rope, head_dim=16, partial_rotary_factor=1.0),
        layer_kinds=(LayerKind.LINEAR_ATTENTION,) * 3 + (LayerKind.FULL_ATTENTION,),
    )


def _assert_same_io(pairs, reference):
    for contract, graph in pairs:
        for kind, ours in (("inputs", contract.inputs), ("outputs", contract.outputs)):
            # Compared in order: each tensor's dims (a shape is positional). Compared as a mapping: the list of
            # graph inputs / outputs, whose order carries no meaning (onnxruntime and onnxruntime-genai bind
            # them by name; the builder lists KV before conv/recurrent state, mtpc by layer). Whether a tensor
            # is an input or an output is compared too.
            expected = {name: (dtype, shape) for name, dtype, shape in reference[graph][kind]}
            assert len(expected) == len(reference[graph][kind])  # no name listed twice
            assert {t.name: (t.dtype, tuple(t.shape)) for t in ours} == expected, (graph, kind)


def test_text_only_main_matches_the_reference_builders_paged_graph():
    # The builder's export has a head but no state updates (dense_paged); a text-only main graph never drafts, so it
    # has none either, and no hidden-state output (no head reads it).
    _, result = _before_and_after(ort=CUDA_PAGED, arch=_reference_arch(mtp_num_layers=0))
    reference = reference_io()
    reference["model.onnx"]["outputs"] = [o for o in reference["model.onnx"]["outputs"] if o[0] != "hidden_states"]
    _assert_same_io([(result.ir.main.contract, "model.onnx")], reference)


def test_matches_the_reference_builders_paged_graphs_with_state_updates():
    # dense_su was built with state_update_capacity=4: ours follows max_draft_tokens, 4 here.
    _, result = _before_and_after(ort=replace(CUDA_PAGED, max_draft_tokens=4), arch=_reference_arch())
    reference = reference_io(REFERENCE_STATE_UPDATE_IO)
    _assert_same_io([(result.ir.main.contract, "model.onnx"), (result.ir.head(ORT).contract, "mtp.onnx")], reference)
    # The layers each state group holds, as the ascending layer indices the reference names its state after.
    main_inputs = [name for name, _, _ in reference["model.onnx"]["inputs"]]
    expected_groups = tuple(
        StateGroup(group, tuple(sorted(int(m.group(1)) for name in main_inputs if (m := pattern.fullmatch(name)))))
        for group, pattern in STATE_KINDS
    )
    assert tuple(replace(g, state_update_capacity=0, key_head_count=0) for g in result.ir.main.state_groups) == (
        expected_groups)
    # The builder's genai_config for that export: every fixed group declares the same capacity, the
    # recurrent one its key-head count (linear_num_key_heads).
    config = json.loads(shared_file("reference/builder-configs/dense_su.genai_config.json").read_text(encoding="utf-8"))
    decoder = config["model"]["decoder"]
    assert result.ir.main.state_update_capacity == decoder["state_update_capacity"]
    assert [(g["kind"], g.get("state_update")) for g in decoder["state_groups"]] == [
        (g.kind, ({"capacity": g.state_update_capacity} | ({"key_head_count": g.key_head_count} if g.key_head_count else {}))
         if g.state_update_capacity else None) for g in result.ir.main.state_groups]
    names = {role: name for role, name in (*result.ir.main.inputs, *result.ir.main.outputs) if "state_update" in role}
    assert names == {k: v for k, v in (*decoder["inputs"].items(), *decoder["outputs"].items()) if "state_update" in k}


def test_pruned_lm_head_selects_logits_rows_and_keeps_every_hidden_row():
    _, result = _before_and_after(ort=replace(CUDA_PAGED, prune_lm_head=True))
    main, head = result.ir.main, result.ir.head(ORT)
    io = _io(main.contract)
    assert io["logits_indices"] == ("int32", ("num_logits",))
    assert io["logits"] == ("float16", ("num_logits", 256))
    assert io["hidden_states"] == ("float16", ("num_tokens", 64))
    assert main.input_name("logits_indices") == "logits_indices"
    # The head is untouched: the engine feeds it every accepted row.
    assert _io(head.contract)["logits"] == ("float16", ("num_tokens", 256))
    assert head.input_name("logits_indices") is None
    _, unpruned = _before_and_after(ort=CUDA_PAGED)
    assert not unpruned.ir.main.contract.has_input("logits_indices")
