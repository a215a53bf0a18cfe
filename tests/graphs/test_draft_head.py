"""The head's own LM head (`mtp.lm_head: own`, `mtp.draft_vocabulary`) on onnxruntime CPU against the numpy head."""

from dataclasses import replace

import numpy as np
import onnx
import pytest

from mtpc.graphs.mtp_head import DRAFT_POSITIONS
from mtpc.ir import DraftVocabulary, HeadContract
from mtpc.ir.contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from mtpc.weights.draft import WithOwnLmHead

from .test_mtp_head import IDS, ort_feeds
from .tiny import ORT_HEAD_FILE, emit, empty_state, make_ir, run, session

TOL = 1e-4
# Every fourth token and the three specials: a draft vocabulary of 66 of 256 tokens.
DRAFT = tuple(sorted({0, 1, 2, *range(3, 256, 4)}))


def _package(arch, tmp_path_factory, draft, logits_dtype=None):
    store = seeded_store(arch, 3)
    ir = make_ir(arch, heads=(HeadContract.ORT_GENAI,), logits_dtype=logits_dtype)
    vocabulary = None if draft is None else DraftVocabulary(draft, "a test's choice")
    ir = replace(ir, mtp=replace(ir.mtp, own_lm_head=True, draft_vocabulary=vocabulary))
    out = tmp_path_factory.mktemp("draft") / "pkg"
    emit(ir, WithOwnLmHead(store, draft), out)
    return out, store


@pytest.mark.parametrize("logits_dtype", [None, "float16"])
@pytest.mark.parametrize("draft", [DRAFT, None], ids=["draft-vocabulary", "every-token"])
def test_own_lm_head_scores_the_draft_vocabulary_and_gives_the_rest_the_lowest_logit(arch, tmp_path_factory, draft,
                                                                                    logits_dtype):
    package, store = _package(arch, tmp_path_factory, draft, logits_dtype)
    _, post, _, _ = Qwen35Reference(arch, store).forward(IDS)
    seed = post.astype(np.float32)
    sess = session(package / ORT_HEAD_FILE)
    ids, hidden, positions = IDS[:, 1:], seed[:, :-1], np.arange(1, 5)[None]
    out = run(sess, ort_feeds(ids, hidden, positions, empty_state(sess, 1), 0))
    logits = out["logits"]
    reference = MtpHeadReference(arch, WithOwnLmHead(store, draft), own_lm_head=True, draft_vocabulary=draft)
    want, normed, _ = reference.forward(ids, hidden, positions)
    assert logits.shape == (1, 4, arch.vocab_size)
    kept = list(draft) if draft is not None else list(range(arch.vocab_size))
    atol = TOL if logits_dtype is None else 2e-2
    np.testing.assert_allclose(logits[..., kept], want[..., kept], atol=atol, rtol=0)
    np.testing.assert_allclose(out["hidden_states_out"], normed, atol=TOL, rtol=0)
    if draft is not None:
        others = np.delete(logits, kept, axis=-1)
        assert np.all(others == np.finfo(logits.dtype).min)
        # The runtime's argmax over the whole row picks a draft-vocabulary token, the reference's pick.
        assert [int(t) for t in logits.argmax(-1)[0]] == [int(t) for t in want.argmax(-1)[0]]
        assert set(int(t) for t in logits.argmax(-1)[0]) <= set(draft)


def test_the_head_reads_its_own_rows_and_only_the_embedding_from_the_main_model(arch, tmp_path_factory):
    package, store = _package(arch, tmp_path_factory, DRAFT)
    head = onnx.load(package / ORT_HEAD_FILE)
    tensors = {i.name: onnx.numpy_helper.to_array(i) for i in head.graph.initializer}
    assert EMBEDDING_INITIALIZER in tensors and LM_HEAD_INITIALIZER not in tensors
    np.testing.assert_array_equal(tensors["mtp.lm_head.MatMul.weight"], store.read_float("lm_head.weight")[list(DRAFT)].T)
    positions = tensors[DRAFT_POSITIONS]
    assert positions.dtype == np.int32 and positions.shape == (arch.vocab_size,)
    assert [int(positions[t]) for t in DRAFT] == list(range(len(DRAFT)))
    assert set(np.delete(positions, list(DRAFT)).tolist()) == {len(DRAFT)}
    main = onnx.load(package / "model.onnx", load_external_data=False)
    lm_head = next(i for i in main.graph.initializer if i.name == LM_HEAD_INITIALIZER)
    assert {e.key: e.value for e in lm_head.external_data}["location"] == "model.onnx.data"
