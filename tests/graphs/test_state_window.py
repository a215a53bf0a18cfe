"""The windowed main graph on onnxruntime CPU: every window slot against the numpy reference's per-token state.

Both forms: the window built from ops (every provider, `graphs/state_window.py`), and the kernels' own
`state_window` attribute that CUDA graphs get (`FusedWindowOps`), run here through its lowering
(tests/lowering/state_window.py), which leaves the slots before the forward's first token zero.

The reference knows nothing of windows: it runs the continuation one token at a time and keeps the
state after each, which is what slot j must hold for token T - W + j (before the forward's first
token, zeros or the state it started from: the runtime never reads those). Past slots other than W - 1 are filled with noise, so a graph that
read them would fail.
"""

from dataclasses import replace

import numpy as np
import onnx
import pytest

from mtpc.passes.state_window import windowed_decoder
from mtpc.reference.forward import DecoderReference

from tests.lowering.moe_relu2 import lower_model as lower_relu2
from tests.lowering.state_window import lower_model

from .tiny import emit, make_ir, run, session

TOL = 1e-4
WINDOW = 4
PROMPT = np.array([[3, 17, 42, 9, 250, 1], [7, 7, 128, 64, 2, 33]], np.int64)


@pytest.fixture(scope="module", params=["ops", "fused"])
def form(request) -> str:
    return request.param


# Both mixers with a recurrent state: Qwen3.5's Gated DeltaNet and Nemotron-H's Mamba2 (LinearAttention's gated
# rule, conv bias, B and C in 2 groups), on the same window.
@pytest.fixture(scope="module", params=["gated_delta_net", "mamba2"])
def arch(request):
    from tests.fixtures.arch import tiny_arch
    from tests.fixtures.nemotron_h_checkpoints import tiny_nemotron_arch

    return tiny_arch() if request.param == "gated_delta_net" else tiny_nemotron_arch()


@pytest.fixture(scope="module")
def store(arch):
    from mtpc.sources.random_weights import seeded_store
    from mtpc.weights import ArrayWeightStore
    from tests.fixtures.nemotron_h_checkpoints import canonical_nemotron_tensors, raw_nemotron_tensors

    if arch.mamba is None:
        return seeded_store(arch, 0)
    return ArrayWeightStore(canonical_nemotron_tensors(arch, raw_nemotron_tensors(arch)))


@pytest.fixture(scope="module")
def windowed(arch, store, tmp_path_factory, form):
    ir = make_ir(arch, heads=())
    out = tmp_path_factory.mktemp("windowed") / "pkg"
    main = windowed_decoder(ir.main, WINDOW)
    if form == "fused":
        main = replace(main, execution_provider="cuda")
    emit(replace(ir, main=main), store, out)
    if form == "ops":
        return session(out / "model.onnx")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    windowed_ops = [n.op_type for n in model.graph.node if any(a.name == "state_window" and a.i == WINDOW
                                                                for a in n.attribute)]
    assert sorted(set(windowed_ops)) == ["CausalConvWithState", "LinearAttention"]
    assert not any(n.op_type == "If" for n in model.graph.node)
    with pytest.raises(Exception, match="state_window"):  # onnxruntime's CPU kernels refuse the attribute
        empty = DecoderReference(arch, store).initial_state(1)
        run(session(out / "model.onnx"), feeds(PROMPT[:1, :2], 0, empty, np.random.default_rng(0), arch))
    onnx.save(lower_relu2(lower_model(model), out), str(out / "model.cpu.onnx"))
    return session(out / "model.cpu.onnx")


def feeds(ids: np.ndarray, past_length: int, state, rng, arch) -> dict:
    """Inputs for `ids` after the reference `state`: KV as is, each linear layer's state in slot W-1 of noise."""
    b, s = ids.shape
    rows = (3, b, s) if arch.rope.position_rows else (b, s)
    positions = np.broadcast_to(np.arange(past_length, past_length + s), rows).astype(np.int64)
    out = {"input_ids": ids, "attention_mask": np.ones((b, past_length + s), np.int64), "position_ids": positions}
    for i, (k, v) in state.kv.items():
        out[f"past_key_values.{i}.key"], out[f"past_key_values.{i}.value"] = k.astype(np.float32), v.astype(np.float32)
    for kind, states in (("conv", state.conv), ("recurrent", state.recurrent)):
        for i, value in states.items():
            window = rng.standard_normal((WINDOW, *value.shape)).astype(np.float32)
            window[-1] = value
            out[f"past.{i}.{kind}"] = window
    return out


def reference_window(reference, ids: np.ndarray, state) -> dict[str, np.ndarray]:
    """The expected present windows: the reference's state after each token, one token at a time."""
    after = {-1: state}
    for t in range(ids.shape[1]):
        *_, after[t] = reference.forward(ids[:, t : t + 1], after[t - 1])
    expected = {}
    for kind in ("conv", "recurrent"):
        for i in getattr(state, kind):
            tokens = [max(ids.shape[1] - WINDOW + j, -1) for j in range(WINDOW)]
            expected[f"present.{i}.{kind}"] = np.stack([getattr(after[t], kind)[i] for t in tokens])
    return expected


# T = 1 (a decode step), 2 and W (verifies: the window holds the whole forward), W + 3 (a prefill chunk longer
# than the window); batch 2 only on the empty past (GQA takes several tokens after a past for batch 1 only).
@pytest.mark.parametrize("batch, prefix, tokens", [(1, 4, 1), (1, 4, 2), (1, 4, WINDOW), (1, 4, WINDOW + 3),
                                                   (2, 0, WINDOW + 2), (2, 0, 3)])
def test_every_slot_is_the_state_after_its_token(windowed, form, reference, batch, prefix, tokens):
    rng = np.random.default_rng(tokens)
    ids = PROMPT[:batch]
    state = reference.initial_state(batch)
    if prefix:
        *_, state = reference.forward(ids[:, :prefix], state)
    continuation = (ids[:, ::-1] * 3 + 11)[:, :tokens] % 256
    out = run(windowed, feeds(continuation, prefix, state, rng, reference.arch))
    logits, post, _, _ = reference.forward(continuation, state)
    np.testing.assert_allclose(out["logits"], logits, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["hidden_states"], post, atol=TOL, rtol=0)
    before = min(WINDOW - tokens, WINDOW) if tokens < WINDOW else 0  # slots of tokens before the forward
    for name, slots in reference_window(reference, continuation, state).items():
        assert out[name].shape == slots.shape
        np.testing.assert_allclose(out[name][before:], slots[before:], atol=TOL, rtol=0, err_msg=name)
        # Never read by the runtime: zeros (a one-token forward's recurrent state; every slot of the fused form's)
        # or the state it started from.
        for j in range(before):
            assert np.allclose(out[name][j], slots[j], atol=TOL) or not out[name][j].any(), (name, j)
        if form == "fused":
            assert not out[name][:before].any(), name


def test_past_and_present_bound_to_one_buffer_give_the_same_result(windowed, reference):
    """onnxruntime-genai binds each state's past and present to one buffer on CPU (RecurrentState's
    share_buffers_): the graph must read slot W - 1 before it writes any slot."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    *_, state = reference.forward(PROMPT[:1, :4])
    inputs = feeds(PROMPT[:1, 3:6] + 1, 4, state, rng, reference.arch)
    expected = run(windowed, inputs)
    binding = windowed.io_binding()
    shared, bound = {}, []
    for name, value in inputs.items():
        if name.startswith("past."):
            shared[name] = ort.OrtValue.ortvalue_from_numpy(value.copy())
            binding.bind_ortvalue_input(name, shared[name])
            binding.bind_ortvalue_output(name.replace("past.", "present."), shared[name])
            bound.append(name.replace("past.", "present."))
        else:
            binding.bind_cpu_input(name, value)
    for output in windowed.get_outputs():
        if output.name not in bound:
            binding.bind_output(output.name)
            bound.append(output.name)
    windowed.run_with_iobinding(binding)
    for name, value in shared.items():
        np.testing.assert_array_equal(value.numpy(), expected[name.replace("past.", "present.")], err_msg=name)
    for name, value in zip(bound, binding.copy_outputs_to_cpu()):
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
